/**
 * The CPPN sample app (apps/video, TypeScript ranks) with snapshots, through the doors a user
 * opens: `reactor run --manifest` of the app with reactor.yaml's `snapshots:` section, a client's
 * `rewind`, and `reactor replay` of a recording's session log. The model is deterministic for a
 * backend kind (2 CPU ranks here), so the frames after a rewind, and a replay's frames, hash the
 * same as the session's.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { connect } from '@reactor/client';
import { cliSync, runCli } from './fixtures/reactor-cli.js';
import { until } from '@reactor/test-kit';

const video = resolve(import.meta.dirname, '../apps/video');
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A workspace whose reactor.yaml serves apps/video on 2 CPU ranks, a snapshot every chunk, recordings in `rec`. */
function workspace(config = 'width: 64\nheight: 48\nframesPerChunk: 4\ndevices: cpu\nworldSize: 2\nbackend: cpu\n'): string {
  const dir = mkdtempSync(join(tmpdir(), 'video-snapshots-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'config.yaml'), config);
  writeFileSync(
    join(dir, 'reactor.yaml'),
    [
      'runtime:',
      `  import: ${join(video, 'dist/index.js')}:VideoApp`,
      '  config: config.yaml',
      `  weights_path: ${join(video, 'weights')}`,
      'server: { port: 0 }',
      'recording: { dir: rec, min_free_bytes: 0 }',
      'snapshots: { every_steps: 1 }',
      '',
    ].join('\n'),
  );
  return dir;
}

const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

describe('snapshots of the CPPN app (apps/video, TypeScript ranks)', () => {
  it('rewinds to a frame: the same frames again and the prompt of then', async () => {
    const dir = workspace();
    const cli = runCli(dir);
    cleanups.push(() => cli.stop());
    const c = await connect(await cli.url, { WebSocket, reconnect: false });
    cleanups.push(() => c.close());
    const hashes = new Map<number, string>();
    const flushes: number[] = [];
    c.on('frame', (f) => hashes.set(f.seq, sha(f.payload)));
    c.on('flush', (f) => flushes.push(f.nextSeq));
    // One seq counter for every track: the soundtrack's chunks take seqs between the video frames.
    const videoSeqs = (): number[] => [...hashes.keys()];
    await until(() => hashes.size >= 24, '24 video frames', 60_000, 10);
    const seen = new Map(hashes);
    const target = videoSeqs()[21]!;
    // A prompt change after them: the rewind takes the session back to the prompt it had then.
    await await c.send('set_prompt', { prompt: 'A desert at dawn.' }).applied;
    expect(c.state['prompt']).toBe('A desert at dawn.');
    const result = (await c.send('rewind', { seq: target })) as { seq: number };
    // A snapshot before every chunk (every_steps: 1): back to the start of the chunk that holds the target.
    expect(result.seq).toBeLessThanOrEqual(target);
    expect(result.seq).toBeGreaterThan(videoSeqs()[16]!);
    expect(flushes).toHaveLength(1);
    expect(c.state['prompt']).toBe('A walk through a forest.');
    const then = [...seen.entries()].filter(([seq]) => seq >= result.seq).slice(0, 4);
    // A rollout moves: equal hashes below mean the same moment again.
    expect(new Set(then.map(([, h]) => h)).size).toBe(4);
    const from = flushes[0]!;
    const again = (): string[] => [...hashes.entries()].filter(([seq]) => seq >= from).map(([, h]) => h);
    await until(() => again().length >= 4, 'four frames after the rewind', 60_000, 10);
    expect(again().slice(0, 4)).toEqual(then.map(([, h]) => h));
    await cli.stop();
  }, 120_000);

  it('replays a recorded session with a rewind in it with reactor replay: every frame identical to the session', async () => {
    const dir = workspace();
    const cli = runCli(dir);
    cleanups.push(() => cli.stop());
    const c = await connect(await cli.url, { WebSocket, reconnect: false });
    cleanups.push(() => c.close());
    let frames = 0;
    const firstSeqs: number[] = [];
    c.on('frame', (f) => {
      frames++;
      firstSeqs.push(f.seq);
    });
    await until(() => frames >= 8, 'the first frames', 60_000, 10);
    const rec = await c.recording('start');
    await until(() => frames >= 20, 'frames while recording', 60_000, 10);
    await await c.send('set_prompt', { prompt: 'A city at night.' }).applied;
    await until(() => frames >= 36, 'frames after the prompt', 60_000, 10);
    await c.send('reset');
    await until(() => frames >= 48, 'frames after the reset', 60_000, 10);
    // Back to before the prompt change and the reset: the replay takes its own snapshot at that point and restores it here.
    const back = (await c.send('rewind', { seq: firstSeqs[24]! })) as { seq: number };
    expect(back.seq).toBeLessThanOrEqual(firstSeqs[24]!);
    const at = frames;
    await until(() => frames >= at + 12, 'frames after the rewind', 60_000, 10);
    await await c.send('set_prompt', { prompt: 'A harbour in fog.' }).applied;
    await until(() => frames >= at + 24, 'frames after the second prompt', 60_000, 10);
    await c.recording('stop');
    const logFile = join(dir, 'rec', rec.name.replace(/\.mp4$/, '.session.json'));
    await until(() => existsSync(logFile), 'the session log beside the recording', 60_000, 10);
    const log = JSON.parse(readFileSync(logFile, 'utf8')) as { app: string; commands: { name: string }[]; frames: unknown[] };
    expect(log.app).toBe('reactor-video');
    expect(log.commands.map((x) => x.name)).toEqual(['set_prompt', 'reset', 'rewind', 'set_prompt']);
    c.close();
    await cli.stop();

    const out = join(dir, 'again.mp4');
    const r = cliSync(['replay', logFile, '--manifest', join(dir, 'reactor.yaml'), '--out', out], {}, dir);
    expect(r.status, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as {
      frames: number;
      identicalFrames: number;
      firstMismatch: number | null;
      mp4Frames: number;
    };
    expect(report.frames).toBe(log.frames.length);
    expect(report.frames).toBeGreaterThanOrEqual(48);
    expect(report.identicalFrames).toBe(report.frames);
    expect(report.firstMismatch).toBeNull();
    expect(report.mp4Frames).toBeGreaterThan(0);
  }, 150_000);
});
