/**
 * The world app as a pipeline when served (issue 39): `reactor run --manifest apps/world/reactor.yaml
 * --config <file>` with `pipeline: blocks | steps`, `ranks: 2`, `inFlight: 2` (the small config,
 * two CPU ranks over gloo): the chunks' latent hashes are the one-rank run's, a command lands
 * on the first frame that shows it, and an `inFlight` out of range stops `reactor run` at start.
 */
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { type ClientFrame, connect } from '@reactor/client';
import { until } from '@reactor/test-kit';
import { app, startCli } from './helpers.js';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
const dir = mkdtempSync(join(tmpdir(), 'world-pipeline-serve-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const CHUNKS = 4;
const meta = (f: ClientFrame) => f.metadata as { chunk: number; recached: boolean; latentHash: string; inFlight: number };

/** A config file: the small model on CPU, one torch thread a rank (the same float order as one rank). */
function config(name: string, extra: string): string {
  const file = join(dir, `${name}.yaml`);
  writeFileSync(file, `model: small\ndevices: cpu\ncompile: off\nthreads: 1\n${extra}\n`);
  return file;
}

/** Serves `cfg`; the latent hash of chunks 0..CHUNKS-1 and the most chunks in flight a frame saw, after `then` with the client and frames. */
async function served(
  cfg: string,
  then?: (c: Awaited<ReturnType<typeof connect>>, frames: ClientFrame[]) => Promise<void>,
): Promise<{ hashes: string[]; inFlight: number; rankSamples: number }> {
  const { child, url, output, exited } = startCli(join(app, 'reactor.yaml'), ['--config', cfg], cleanups);
  const base = await url;
  const c = await connect(base, { WebSocket, reconnect: false });
  cleanups.push(() => c.close());
  const frames: ClientFrame[] = [];
  c.on('frame', (f) => frames.push(f));
  const hashes = new Map<number, string>();
  c.on('frame', (f) => hashes.set(meta(f).chunk, meta(f).latentHash));
  await until(() => [...Array(CHUNKS).keys()].every((i) => hashes.has(i)), `chunks 0..${CHUNKS - 1}`, 150_000);
  await then?.(c, frames);
  // The steps' runner stages in /metrics (pipelined steps too: each step its own calls).
  const metrics = await (await fetch(new URL('/metrics', base))).text();
  const rankSamples = Number(/^reactor_step_stage_seconds_count\{stage="runner_ranks"\} (\d+)/m.exec(metrics)?.[1] ?? 0);
  c.close();
  child.kill('SIGTERM');
  expect(await exited, output()).toBe(0);
  expect(readdirSync('/dev/shm').filter((f) => f.startsWith(`reactor-${child.pid}.`))).toEqual([]);
  return { hashes: [...Array(CHUNKS).keys()].map((i) => hashes.get(i)!), inFlight: Math.max(...frames.map((f) => meta(f).inFlight)), rankSamples };
}

describe('apps/world served as a pipeline (reactor run, small config, 2 CPU ranks, gloo)', () => {
  it('gives the one-rank chunks with its blocks split and with its steps split, two chunks in flight; a prompt lands on the first frame that shows it', async () => {
    const one = await served(config('one', 'pipeline: none'));
    expect(one.inFlight).toBe(1);
    expect(one.rankSamples).toBeGreaterThanOrEqual(CHUNKS);
    for (const shape of ['blocks', 'steps']) {
      const got = await served(config(shape, `pipeline: ${shape}\nranks: 2\ninFlight: 2`), async (c, frames) => {
        if (shape !== 'blocks') return;
        const cmd = c.send('set_prompt', { prompt: 'a city at night' });
        await cmd;
        const applied = await cmd.applied;
        expect(applied.outcome).toBe('applied');
        const seq = (applied as { seq: number }).seq;
        await until(() => frames.some((f) => f.seq >= seq), 'the frame named by applied', 150_000);
        const shown = frames.filter((f) => f.seq >= seq).sort((x, y) => x.seq - y.seq)[0]!;
        // The re-cached chunk (the new prompt) starts at the named frame; every frame before it is older.
        expect(meta(shown).recached).toBe(true);
        expect(frames.filter((f) => f.seq < seq).every((f) => meta(f).chunk < meta(shown).chunk)).toBe(true);
      });
      expect(got.hashes, shape).toEqual(one.hashes);
      // The step loop sent a chunk's call while the one before it ran (the runner kept two).
      expect(got.inFlight, shape).toBe(2);
      // Pipelined steps are timed by stage as one at a time are (a chunk's runner_ranks sample each).
      expect(got.rankSamples, shape).toBeGreaterThanOrEqual(CHUNKS);
    }
  }, 600_000);

  it('refuses inFlight out of range at start with the runner_option error', async () => {
    const { exited, output, url } = startCli(join(app, 'reactor.yaml'), ['--config', config('nine', 'pipeline: blocks\nranks: 2\ninFlight: 9')], cleanups);
    url.catch(() => undefined);
    expect(await exited).toBe(1);
    // The runner's own check (code runner_option), before any rank starts.
    expect(output()).toContain('RunnerOptionError: options.maxInFlight must be an integer from 1 (one call at a time) to 8, got 9. [app_load_failed]');
  }, 120_000);
});
