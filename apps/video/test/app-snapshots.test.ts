// VideoApp's snapshots through AppHost.snapshots (the door fork and move build on), with real
// rank processes: the rollout's state is replicated on every rank, so a snapshot of 2 ranks
// restores into 1 and the next frames are the same bytes; a snapshot of another model config
// (a seed) is refused with snapshot_version_mismatch and nothing changes.
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AppHost, SnapshotError } from '@reactor/runtime';
import { RecordingLogger, RecordingSink } from '@reactor/runtime/testing';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { VideoApp } from '../src/app.js';

const here = dirname(fileURLToPath(import.meta.url));
const weights = resolve(here, '../weights');
const scratch = mkdtempSync(join(tmpdir(), 'video-app-snapshots-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function configFile(name: string, extra: string): string {
  const file = join(scratch, `${name}.yaml`);
  writeFileSync(file, `width: 32\nheight: 24\nframesPerChunk: 2\ndevices: cpu\nbackend: cpu\n${extra}`);
  return file;
}

const hosts: AppHost[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((h) => h.close()));
});

async function running(config: string): Promise<{ host: AppHost; sink: RecordingSink }> {
  const host = new AppHost(VideoApp, { weightsPath: weights, logger: new RecordingLogger(), statsIntervalMs: 0 });
  hosts.push(host);
  await host.load({ configPath: config });
  const sink = new RecordingSink();
  host.connect(sink);
  await sink.waitForFrames(4, { timeoutMs: 30_000 });
  return { host, sink };
}

/** Hashes of the first `n` frames after the sink's newest flush (the frames made from a restored snapshot). */
async function framesAfterFlush(sink: RecordingSink, n: number): Promise<string[]> {
  const flush = sink.events.findLastIndex((e) => e.kind === 'message' && e.msg.type === 'flush');
  expect(flush).toBeGreaterThanOrEqual(0);
  const after = (): Uint8Array[] => sink.events.slice(flush).flatMap((e) => (e.kind === 'frame' ? [e.frame.rgb] : []));
  await sink.waitFor(() => after().length >= n, { from: flush, timeoutMs: 30_000 });
  return after()
    .slice(0, n)
    .map((rgb) => createHash('sha256').update(rgb).digest('hex'));
}

describe('VideoApp snapshots (AppHost.snapshots, real ranks)', () => {
  it('a snapshot of 2 ranks restores into 1 with the same next frames; another seed is snapshot_version_mismatch', async () => {
    const two = await running(configFile('two', 'worldSize: 2\n'));
    const bytes = await two.host.snapshots!.take();
    await two.host.snapshots!.restore(bytes);
    const fromTwo = await framesAfterFlush(two.sink, 4);
    expect(new Set(fromTwo).size).toBe(4);

    const one = await running(configFile('one', 'worldSize: 1\n'));
    await one.host.snapshots!.restore(bytes);
    expect(await framesAfterFlush(one.sink, 4)).toEqual(fromTwo);

    const seeded = await running(configFile('seeded', 'worldSize: 1\nseed: 7\n'));
    const before = seeded.sink.frames.length;
    const refused = await seeded.host.snapshots!.restore(bytes).then(
      () => 'restored',
      (e: unknown) => (e instanceof SnapshotError ? `${e.code}: ${e.message}` : String(e)),
    );
    expect(refused).toMatch(/^snapshot_version_mismatch: the snapshot is of the video model 32x24, 2 frames a chunk, seed 0, .* and this app runs .*seed 7/);
    // Nothing changed: no flush, the session goes on.
    expect(seeded.sink.ofType('flush')).toHaveLength(0);
    await seeded.sink.waitFor(() => seeded.sink.frames.length >= before + 2, { timeoutMs: 30_000 });
  }, 120_000);
});
