/**
 * The seed page's example as a user runs it: `reactor run --manifest apps/seed-video/reactor.yaml`
 * in a child process, its worker the page's `video_worker.py` (unchanged) on 2 Python ranks
 * (CPU, gloo), a Node client in this process. The Python comes from REACTOR_PYTHON (the
 * manifest's `python3` otherwise).
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { until } from '@reactor/test-kit';
import { PY, app, cli, startCli } from './helpers.js';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { connect, type ReactorClient, type SessionStatus } from '@reactor/client';

/** sha256 of `video_worker.py` as printed on the seed page (multi-gpu-inference.md, "Define your worker"). */
const SEED_WORKER_SHA256 = 'e69d0e8eb5618ce0012ca05d54ea3fb43ccaa63695e08376a7a92d3de0b9eea9';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** Python rank processes (`reactor_worker._rank`) below `pid`, zombies excluded. */
function pythonRanks(pid: number): number[] {
  const parent = new Map<number, number>();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      if (stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z')) continue;
      parent.set(Number(d), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // gone while we looked
    }
  }
  const below = (p: number) => {
    for (let q = parent.get(p); q !== undefined && q > 1; q = parent.get(q)) if (q === pid) return true;
    return false;
  };
  return [...parent.keys()].filter((p) => {
    try {
      return below(p) && readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('reactor_worker._rank');
    } catch {
      return false;
    }
  });
}

function segmentsOf(pid: number): string[] {
  return readdirSync('/dev/shm').filter((f) => f.startsWith(`reactor-${pid}.`));
}

async function client(base: string): Promise<{ c: ReactorClient; frames: { seq: number; at: number }[]; flushes: number[]; sessions: SessionStatus[] }> {
  const c = await connect(base, { WebSocket, reconnect: false });
  cleanups.push(() => c.close());
  const frames: { seq: number; at: number }[] = [];
  const flushes: number[] = [];
  const sessions: SessionStatus[] = [];
  c.on('frame', (f) => frames.push({ seq: f.seq, at: performance.now() }));
  c.on('flush', (f) => flushes.push(f.nextSeq));
  c.on('session', (s) => sessions.push(s));
  return { c, frames, flushes, sessions };
}

describe('the seed example (VideoApp + the page’s video_worker.py) under reactor run', () => {
  it('runs video_worker.py exactly as printed on the seed page', () => {
    const text = readFileSync(join(app, 'worker/video_worker.py'));
    expect(createHash('sha256').update(text).digest('hex')).toBe(SEED_WORKER_SHA256);
    expect(text.toString()).toContain('from reactor_runtime.distributed import DistributedWorker');
  });

  it('streams, recovers RolloutExhausted by a reset, obeys reset; a SIGKILLed rank ends the session at once and leaves nothing; the next session gets a new runner', async () => {
    const { child, url, stderr } = startCli(cleanups);
    const base = await url;
    // reactor.yaml declares 2 GPUs: the app starts 2 ranks (on CPU here).
    const ranks = pythonRanks(child.pid!);
    expect(ranks).toHaveLength(2);
    expect(stderr()).toMatch(/No GPU found on this machine: 2 ranks run on CPU/);

    const first = await client(base);
    expect(first.c.schema.commands.map((x) => x.name).sort()).toEqual(['reset', 'rewind', 'set_paused', 'set_prompt']);
    await until(() => first.frames.length >= 4, 'the first frames');

    // A rollout is 16 chunks of 4 frames: past frame 64 the app has reset it by itself (a flush).
    await until(() => first.frames.length > 70 && first.flushes.length > 0, 'frames past the first rollout', 60_000);
    const flushesBefore = first.flushes.length;
    await first.c.send('reset');
    await until(() => first.flushes.length > flushesBefore, 'the flush of the reset command');

    // A rank SIGKILLed mid-stream: the session ends with the error, at once.
    const killedAt = performance.now();
    process.kill(ranks[1]!, 'SIGKILL');
    await until(() => first.sessions.some((s) => s.error !== undefined), 'the session error', 5000);
    const toldMs = performance.now() - killedAt;
    const failed = first.sessions.find((s) => s.error !== undefined)!;
    expect(failed.error!.message).toMatch(/Rank 1 \(pid \d+\) was killed by SIGKILL/);
    // The exit event, not the 5 s stall watch; room for a loaded 2-core machine.
    expect(toldMs).toBeLessThan(2500);
    // The clients are told first; the teardown (the other rank stopped, the segments unlinked) follows.
    await until(() => pythonRanks(child.pid!).length === 0, 'every rank gone', 5000);
    await until(() => segmentsOf(child.pid!).length === 0, 'every segment unlinked', 5000);

    // The next session starts a new runner (our addition to the page's app) and streams.
    const second = await client(base);
    await until(() => second.frames.length >= 4, 'frames in the next session', 30_000);
    expect(pythonRanks(child.pid!)).toHaveLength(2);

    second.c.close();
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(pythonRanks(child.pid!)).toEqual([]);
    expect(segmentsOf(child.pid!)).toEqual([]);
  }, 120_000);

  it('after a load that failed before its runner existed (no weights_path), reports the load error and exits without an unload error', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'seed-no-weights-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, 'reactor.yaml'), `runtime:\n  import: ${join(app, 'dist/index.js')}:VideoApp\nserver: { port: 0 }\n`);
    const child = spawn(process.execPath, [cli, 'run', '--manifest', join(dir, 'reactor.yaml')], {
      cwd: dir,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: Object.fromEntries(Object.entries({ ...process.env, REACTOR_PYTHON: PY }).filter(([k]) => k !== 'REACTOR_WEIGHTS_PATH')),
    });
    cleanups.push(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    });
    let err = '';
    child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    child.stdout!.resume();
    // reactor run gives up on a failed load: it unloads the app and exits 1.
    const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
    expect(code).toBe(1);
    expect(err).toContain('VideoApp.load() failed: WeightsPathNotSetError');
    expect(err).not.toMatch(/unload\(\) threw/);
    expect(err).not.toContain("Cannot read properties of undefined (reading 'shutdown')");
  }, 90_000);
});
