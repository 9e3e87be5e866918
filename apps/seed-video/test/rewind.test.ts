/**
 * Rewind as a user makes it: `reactor run --manifest apps/seed-video/reactor.yaml` in a child
 * process (2 Python ranks on CPU), a Node client sending the built-in `rewind` command. The
 * model is deterministic (float64 on CPU), so the frames after a rewind are the very frames
 * first made from that snapshot: their JPEG bytes hash the same.
 */
import { createHash } from 'node:crypto';
import { until } from '@reactor/test-kit';
import { startCli } from './helpers.js';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { CommandFailedError, connect } from '@reactor/client';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const failure = (p: Promise<unknown>): Promise<string> =>
  p.then(
    () => 'ok',
    (e: unknown) => (e instanceof CommandFailedError ? e.code : `not a command error: ${String(e)}`),
  );

describe('rewind (seed-video under reactor run)', () => {
  it('goes back to a snapshot: the same frames again, applied at the first new frame; bad rewinds are refused with their codes; the ring is in /metrics', async () => {
    const { child, url } = startCli(cleanups);
    const base = await url;
    const c = await connect(base, { WebSocket, reconnect: false });
    cleanups.push(() => c.close());
    expect(c.schema.commands.map((x) => x.name)).toContain('rewind');
    const hashes = new Map<number, string>();
    const flushes: number[] = [];
    c.on('frame', (f) => hashes.set(f.seq, createHash('sha256').update(f.payload).digest('hex')));
    c.on('flush', (f) => flushes.push(f.nextSeq));

    // Snapshots every 4 chunks of 4 frames: the ring has the snapshots whose first frames are 0, 16 and 32 once frame 40 played.
    await until(() => hashes.has(40), 'frame 40');
    const seen = new Map(hashes);
    // The frames differ from one another (a rollout moves): equal hashes below mean the same moment again.
    expect(new Set([32, 33, 34, 35, 36, 37, 38, 39].map((s) => seen.get(s))).size).toBe(8);
    const rewind = c.send('rewind', { seq: 40 });
    const result = (await rewind) as { seq: number; secondsBack: number; bytes: number; restoreMs: number };
    expect(result.seq).toBe(32);
    expect(result.bytes).toBeGreaterThan(48 * 64 * 8); // the motion state: 48 patches x 64 float64
    expect(result.secondsBack).toBeGreaterThan(0);
    expect(flushes.length).toBe(1);
    const from = flushes[0]!;
    const applied = await rewind.applied;
    expect(applied.outcome).toBe('applied');
    expect((applied as { seq: number }).seq).toBe(from);
    await until(() => hashes.has(from + 7), 'eight frames after the rewind');
    for (let i = 0; i < 8; i++) expect(hashes.get(from + i), `frame ${from + i} = frame ${32 + i}`).toBe(seen.get(32 + i));

    // Bad rewinds: both or neither of seq and seconds, further back than the ring holds.
    expect(await failure(c.send('rewind', {}))).toBe('invalid_params');
    expect(await failure(c.send('rewind', { seq: 1, seconds: 1 }))).toBe('invalid_params');
    expect(await failure(c.send('rewind', { seconds: 3600 }))).toBe('rewind_out_of_range');
    // A flood: at most a burst of 3 (one spent above), refilled at 2 a second.
    const flood = await Promise.all(Array.from({ length: 6 }, () => failure(c.send('rewind', { seq: 0 }))));
    expect(flood).toContain('rewind_rate_limited');
    expect(flood).toContain('ok');

    const metrics = await (await fetch(new URL('/metrics', base))).text();
    expect(Number(/^reactor_snapshot_ring_bytes (\d+)/m.exec(metrics)?.[1])).toBeGreaterThan(0);
    expect(Number(/^reactor_rewinds_total (\d+)/m.exec(metrics)?.[1])).toBeGreaterThanOrEqual(2);
    expect(Number(/^reactor_snapshots_total\{outcome="taken"\} (\d+)/m.exec(metrics)?.[1])).toBeGreaterThanOrEqual(3);

    c.close();
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  }, 90_000);
});
