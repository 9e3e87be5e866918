/**
 * reactor.yaml's `snapshots:` section through the door a user opens: `reactor run --manifest`
 * of seed-video's manifest with the section added (2 Python ranks on CPU). Each key changes the
 * ring from the app's own `@reactorApp({ snapshot: { everySteps: 4 } })`.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { CommandFailedError, connect, type ReactorClient } from '@reactor/client';
import { until } from '@reactor/test-kit';
import { app, startCli } from './helpers.js';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
const dir = mkdtempSync(join(tmpdir(), 'seed-snapshots-yaml-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** seed-video's reactor.yaml, its paths absolute, with `section` appended. */
function manifest(name: string, section: string): string {
  const text = readFileSync(join(app, 'reactor.yaml'), 'utf8')
    .replace('import: dist/index.js', `import: ${join(app, 'dist/index.js')}`)
    .replace('weights_path: weights', `weights_path: ${join(app, 'weights')}`)
    .replace('path: [worker]', `path: [${join(app, 'worker')}]`);
  const file = join(dir, `${name}.yaml`);
  writeFileSync(file, `${text}\n${section}\n`);
  return file;
}

const failure = (p: Promise<unknown>): Promise<{ code: string; message: string }> =>
  p.then(
    () => ({ code: 'ok', message: '' }),
    (e: unknown) => (e instanceof CommandFailedError ? { code: e.code, message: e.message } : { code: 'not a command error', message: String(e) }),
  );

async function served(file: string): Promise<{ c: ReactorClient; base: string; seqs: Set<number>; stop: () => Promise<number | null> }> {
  const { child, url } = startCli(cleanups, { manifest: file });
  const base = await url;
  const c = await connect(base, { WebSocket, reconnect: false });
  cleanups.push(() => c.close());
  const seqs = new Set<number>();
  c.on('frame', (f) => seqs.add(f.seq));
  const stop = async (): Promise<number | null> => {
    c.close();
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    child.kill('SIGTERM');
    return exited;
  };
  return { c, base, seqs, stop };
}

describe("reactor.yaml's snapshots: section (seed-video under reactor run)", () => {
  it('every_steps: 1 takes a snapshot before every chunk: a rewind to frame 41 goes back to 40 (the app alone: 32)', async () => {
    const { c, seqs, stop } = await served(manifest('every', 'snapshots:\n  every_steps: 1'));
    await until(() => seqs.has(44), 'frame 44');
    const result = (await c.send('rewind', { seq: 41 })) as { seq: number };
    expect(result.seq).toBe(40);
    expect(await stop()).toBe(0);
  }, 90_000);

  it('ring_bytes below one snapshot keeps only the newest: frame 0 is out of range; max_bytes below one stops the ring (snapshot_too_big, counted)', async () => {
    const ring = await served(manifest('ring', 'snapshots:\n  ring_bytes: 1'));
    await until(() => ring.seqs.has(40), 'frame 40');
    const far = await failure(ring.c.send('rewind', { seq: 0 }));
    expect(far.code).toBe('rewind_out_of_range');
    const held = await (await fetch(new URL('/metrics', ring.base))).text();
    // One snapshot of 48 x 64 float64 and the state: the ring holds one, not the three since frame 0.
    expect(Number(/^reactor_snapshot_ring_bytes (\d+)/m.exec(held)?.[1])).toBeLessThan(2 * 48 * 64 * 8);
    expect(await ring.stop()).toBe(0);

    const small = await served(manifest('small', 'snapshots:\n  max_bytes: 1000'));
    await until(() => small.seqs.has(20), 'frame 20');
    const metrics = await (await fetch(new URL('/metrics', small.base))).text();
    expect(Number(/^reactor_snapshots_total\{outcome="failed"\} (\d+)/m.exec(metrics)?.[1])).toBe(1);
    // No snapshot was taken: /metrics writes no "taken" sample, or a zero one.
    expect(Number(/^reactor_snapshots_total\{outcome="taken"\} (\d+)/m.exec(metrics)?.[1] ?? 0)).toBe(0);
    expect((await failure(small.c.send('rewind', { seq: 0 }))).code).toBe('rewind_out_of_range');
    expect(await small.stop()).toBe(0);
  }, 120_000);
});
