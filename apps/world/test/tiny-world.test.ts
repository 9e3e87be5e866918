/**
 * The tiny world as a user plays it: `reactor run --manifest apps/world/tiny-world.yaml` in a child
 * process (the shipped weights on one CPU rank, Debian's torch), a Node client over a real socket
 * holding keys. The direction a key moves the view is the renderer's: the same start pose and
 * keys are drawn by `reactor_world.tiny.render` and the shifts compared.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { type ClientFrame, connect, type ReactorClient } from '@reactor/client';
import { until } from '@reactor/test-kit';
import { PY, type Served, app, startCli } from './helpers.js';
const SIZE = 64;

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function startTiny(config: string): Served {
  return startCli(join(app, 'tiny-world.yaml'), ['--config', config], cleanups);
}

function tmpConfig(body: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'tiny-world-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const p = join(dir, 'config.yaml');
  writeFileSync(p, body);
  return p;
}

interface Seen {
  c: ReactorClient;
  frames: ClientFrame[];
  states: Record<string, unknown>[];
}

async function client(base: string): Promise<Seen> {
  const c = await connect(base, { WebSocket, reconnect: false });
  cleanups.push(() => c.close());
  const seen: Seen = { c, frames: [], states: [] };
  c.on('frame', (f) => seen.frames.push(f));
  c.on('state', (s) => seen.states.push(s));
  return seen;
}

type Meta = { chunk: number; keys: string[]; fromRenderer: boolean };
const meta = (f: ClientFrame): Meta => f.metadata as Meta;

/** Grey levels of a 64x64 RGB frame. */
function grey(rgb: Uint8Array): Float64Array {
  const g = new Float64Array(SIZE * SIZE);
  for (let i = 0; i < g.length; i++) g[i] = (rgb[3 * i]! + rgb[3 * i + 1]! + rgb[3 * i + 2]!) / 3;
  return g;
}

/** The whole-pixel shift s that best explains b[x] = a[x - s] (as tiny/evaluate.py's horizontal_shift). */
function shift(a: Uint8Array, b: Uint8Array, max = 16): number {
  const ga = grey(a);
  const gb = grey(b);
  let best = Infinity;
  let arg = 0;
  for (let s = -max; s <= max; s++) {
    let e = 0;
    let n = 0;
    for (let y = 0; y < SIZE; y++) {
      for (let x = Math.max(0, s); x < Math.min(SIZE, SIZE + s); x++) {
        const d = gb[y * SIZE + x]! - ga[y * SIZE + x - s]!;
        e += d * d;
        n++;
      }
    }
    if (e / n < best) [best, arg] = [e / n, s];
  }
  return arg;
}

/** The view's travel over a chunk: frame-to-frame shifts from `last` summed (tiny/evaluate.py's chunk_shift). */
function travel(last: Uint8Array, chunk: Uint8Array[]): number {
  let prev = last;
  let total = 0;
  for (const f of chunk) {
    total += shift(prev, f);
    prev = f;
  }
  return total;
}

/** Mean PSNR (dB) of frames against the true ones. */
function psnr(got: Uint8Array[], want: Uint8Array[]): number {
  let sum = 0;
  got.forEach((g, i) => {
    let se = 0;
    for (let j = 0; j < g.length; j++) se += (g[j]! - want[i]![j]!) ** 2;
    sum += 10 * Math.log10((255 * 255) / Math.max(se / g.length, 1e-10));
  });
  return sum / got.length;
}

/** The renderer's frames: the start chunk at pose `start`, then one chunk with `key` held (uint8 64x64x3 each). */
function truth(start: number, key: string): Uint8Array[] {
  const code = [
    'import sys, numpy as np',
    'from reactor_world.tiny.render import ACTION_KEYS, World, random_pose, rollout',
    'w = World(); start, key = int(sys.argv[1]), sys.argv[2]',
    'pose = random_pose(w, np.random.default_rng(start), 1)',
    'still = np.zeros((1, 3, 6), np.uint8); ctx, poses = rollout(w, pose, still)',
    'a = still.copy(); a[:, :, ACTION_KEYS.index(key)] = 1',
    'nxt, _ = rollout(w, poses[:, -1], a)',
    'sys.stdout.buffer.write(np.concatenate([ctx[0], nxt[0]]).tobytes())',
  ].join('\n');
  const r = spawnSync(PY, ['-c', code, String(start), key], { cwd: join(app, 'python'), maxBuffer: 1 << 24 });
  if (r.status !== 0) throw new Error(`the renderer failed: ${r.stderr.toString()}`);
  const out: Uint8Array[] = [];
  for (let i = 0; i < 6; i++) out.push(new Uint8Array(r.stdout.buffer, r.stdout.byteOffset + i * SIZE * SIZE * 3, SIZE * SIZE * 3));
  return out;
}

describe('apps/world tiny-world under reactor run (shipped weights, CPU)', () => {
  it('starts from the renderer, publishes the key bindings, and held turn keys move the view the way the renderer says', async () => {
    const weights = join(app, 'weights/tiny-world.safetensors');
    const info = JSON.parse(readFileSync(join(app, 'weights/tiny-world.json'), 'utf8')) as { sha256: string };
    expect(createHash('sha256').update(readFileSync(weights)).digest('hex')).toBe(info.sha256);
    const { child, url, exited, output } = startTiny(tmpConfig('upscale: 1\n'));
    const a = await client(await url);
    const setKeys = a.c.schema.commands.find((x) => x.name === 'set_keys')!;
    const field = (setKeys.params['properties'] as Record<string, Record<string, unknown>>)['keys']!;
    expect(field['x-reactor-keys']).toMatchObject({ w: 'forward', a: 'turn_left', d: 'turn_right', s: 'back' });

    // Chunk 0 is the renderer's start pose (start 0): the same pixels the renderer draws.
    await until(() => a.frames.length >= 3, 'the start chunk', 90_000);
    const first = a.frames.slice(0, 3);
    expect(first.map((f) => meta(f).fromRenderer)).toEqual([true, true, true]);
    expect([first[0]!.width, first[0]!.height]).toEqual([SIZE, SIZE]);
    const left = truth(0, 'turn_left');
    expect(Buffer.from(first[2]!.payload).equals(Buffer.from(left[2]!))).toBe(true);

    // Hold a turn: the chunk the command reached (its 3 frames) is compared with the renderer's
    // chunk for the same start and key, and with the other key's.
    const right = truth(0, 'turn_right');
    const got: Record<string, { travel: number; own: number; other: number; want: number }> = {};
    for (const [key, own, other] of [
      ['turn_left', left, right],
      ['turn_right', right, left],
    ] as const) {
      const flushes = a.frames.length;
      await a.c.send('reset');
      await until(() => a.frames.slice(flushes).some((f) => meta(f).fromRenderer), 'the start chunk after reset', 90_000);
      const cmd = a.c.send('set_keys', { keys: [key] });
      await cmd;
      const applied = await cmd.applied;
      expect(applied.outcome).toBe('applied');
      const seq = (applied as { seq: number }).seq;
      await until(() => a.frames.filter((f) => f.seq >= seq).length >= 3, 'the chunk named by applied', 90_000);
      const chunk = a.frames.filter((f) => f.seq >= seq).slice(0, 3);
      expect(chunk.map((f) => meta(f).keys)).toEqual([[key], [key], [key]]);
      expect(new Set(chunk.map((f) => meta(f).chunk)).size).toBe(1);
      const before = a.frames.filter((f) => f.seq < seq && meta(f).fromRenderer).at(-1)!;
      const frames = chunk.map((f) => f.payload);
      got[key] = {
        travel: travel(before.payload, frames),
        want: travel(own[2]!, own.slice(3)),
        own: psnr(frames, own.slice(3)),
        other: psnr(frames, other.slice(3)),
      };
      // Released, and shown released before the next step (a recording started next must hold no frame of this key).
      const release = a.c.send('set_keys', { keys: [] });
      await release;
      await release.applied;
    }
    const l = got['turn_left']!;
    const r = got['turn_right']!;
    const said = JSON.stringify(got);
    // The renderer: turning left moves the picture right, turning right moves it left.
    expect(Math.sign(l.want), said).toBe(1);
    expect(Math.sign(r.want), said).toBe(-1);
    // The model: turn-left moves the view the renderer's way; turn-right's view travels less far
    // right than turn-left's (the same order as the truth); each chunk is nearer its own key's truth.
    expect(Math.sign(l.travel), said).toBe(1);
    expect(r.travel, said).toBeLessThan(l.travel);
    expect(l.own, said).toBeGreaterThan(l.other);
    expect(r.own, said).toBeGreaterThan(r.other);

    // An unknown action is refused by name; nothing is applied.
    await expect(a.c.send('set_keys', { keys: ['jump'] })).rejects.toMatchObject({ code: 'invalid_params' });
    await expect(a.c.send('set_keys', { keys: 'forward' })).rejects.toMatchObject({ code: 'invalid_params' });

    // A played session as training data: a recording of it (with its .frames.jsonl, the
    // manifest's recording.frame_metadata) becomes a training file train.py reads.
    const rec = await a.c.recording('start');
    cleanups.push(() => {
      for (const f of [rec.name, rec.name.replace(/\.mp4$/, '.json'), rec.name.replace(/\.mp4$/, '.frames.jsonl')])
        rmSync(join(app, 'recordings', f), { force: true });
    });
    expect(rec.frames).toBe(rec.name.replace(/\.mp4$/, '.frames.jsonl'));
    await a.c.send('set_keys', { keys: ['forward', 'turn_left'] });
    const recFrom = a.frames.length;
    await until(() => a.frames.length >= recFrom + 30, '30 frames recorded', 90_000);
    await a.c.send('set_keys', { keys: [] });
    const recSeen = a.frames.length;
    await until(() => a.frames.length >= recSeen + 9, '9 more frames recorded', 90_000);
    const done = await a.c.recording('stop');
    const sidecar = readFileSync(join(app, 'recordings', done.frames!), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { seq: number; metadata: Meta });
    // One line per frame, in order; the keys each frame says are the ones the client saw with it.
    const bySeq = new Map(a.frames.map((f) => [f.seq, meta(f)]));
    expect(sidecar.length).toBeGreaterThanOrEqual(30);
    sidecar.forEach((l, i) => {
      if (i > 0) expect(l.seq).toBe(sidecar[i - 1]!.seq + 1);
      expect(l.metadata.keys).toEqual(bySeq.get(l.seq)?.keys);
    });
    const npz = join(tmpConfig('').replace(/config\.yaml$/, ''), 'played.npz');
    const conv = spawnSync(PY, ['-m', 'reactor_world.tiny.recording', join(app, 'recordings', done.name), '--out', npz, '--seq-frames', '6'], {
      cwd: join(app, 'python'),
      encoding: 'utf8',
    });
    expect(conv.status, conv.stderr).toBe(0);
    const check = [
      'import sys, numpy as np',
      'from reactor_world.tiny.data import read_training_file',
      'f, a, m = read_training_file(sys.argv[1])',
      'print(f.shape[0], f.shape[1], m["source"], int(a[:, :, 0].sum()), int(a[:, :, 2].sum()), int(a[:, :, 3].sum()))',
      'open(sys.argv[2], "wb").write(f[0].tobytes())',
    ].join('\n');
    const seq0 = `${npz}.seq0`;
    const read = spawnSync(PY, ['-c', check, npz, seq0], { cwd: join(app, 'python'), encoding: 'utf8' });
    expect(read.status, read.stderr).toBe(0);
    const [n, t, source, fwd, heldLeft, heldRight] = read.stdout.trim().split(' ');
    expect(Number(n)).toBeGreaterThanOrEqual(3);
    expect([t, source]).toEqual(['6', 'recording']);
    // forward and turn_left were held together, turn_right never.
    expect(Number(fwd)).toBeGreaterThan(0);
    expect(heldLeft).toBe(fwd);
    expect(heldRight).toBe('0');
    // The first sequence's pixels are the frames the client saw at those seqs (after one H.264
    // encode): each nearer its own frame than the frame after it.
    const startsChunk = sidecar.findIndex((l, i) => i === 0 || l.metadata.chunk !== sidecar[i - 1]!.metadata.chunk);
    const bytes = readFileSync(seq0);
    const px = SIZE * SIZE * 3;
    const seen = (i: number): Uint8Array => a.frames.find((f) => f.seq === sidecar[startsChunk + i]!.seq)!.payload;
    for (let i = 0; i < 5; i++) {
      const decoded = new Uint8Array(bytes.buffer, bytes.byteOffset + i * px, px);
      expect(psnr([decoded], [seen(i)])).toBeGreaterThan(psnr([decoded], [seen(i + 1)]));
    }
    // Listed and served beside its .mp4.
    const origin = new URL(await url).origin;
    const listed = (await (await fetch(`${origin}/recordings`)).json()) as { recordings: { name: string; frames?: string }[] };
    expect(listed.recordings.find((r) => r.name === done.name)?.frames).toBe(done.frames);
    const served = await fetch(`${origin}/recordings/${done.frames!}`);
    expect(served.headers.get('content-type')).toBe('application/x-ndjson');
    expect((await served.text()).trim().split('\n').length).toBe(sidecar.length);
    // Without its .frames.jsonl a recording is refused by name, with the setting that writes one.
    rmSync(join(app, 'recordings', done.frames!));
    const none = spawnSync(PY, ['-m', 'reactor_world.tiny.recording', join(app, 'recordings', done.name), '--out', npz], {
      cwd: join(app, 'python'),
      encoding: 'utf8',
    });
    expect(none.status).toBe(2);
    expect(none.stderr).toMatch(/world_training_data_invalid.*has no .*\.frames\.jsonl beside it: record with `recording: \{frame_metadata: true\}`/);

    // Keys held across a reconnect: the leaving client's keys are let go; a new connection finds [].
    await a.c.send('set_keys', { keys: ['forward'] });
    await until(() => (a.c.state['keys'] as string[])[0] === 'forward', 'forward held', 90_000);
    a.c.close();
    const b = await client(await url);
    await until(() => (b.c.state['keys'] as string[] | undefined)?.length === 0, 'the keys released', 90_000);
    const fromB = b.frames.length;
    await until(() => b.frames.length >= fromB + 3, 'frames after the reconnect', 90_000);
    expect(b.frames.slice(fromB + 3).every((f) => meta(f).keys.length === 0)).toBe(true);
    b.c.close();
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(output()).toMatch(/tiny world: [\d.]+M parameters from .*tiny-world\.safetensors, bfloat16 on CPU/);
  }, 180_000);

  it('refuses weights of another config with the key named', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tiny-ckpt-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const code = [
      'import sys',
      'from dataclasses import replace',
      'from reactor_world.tiny.model import TINY_WORLD, ActionWanModel',
      'from reactor_world.checkpoint import write_safetensors',
      'm = ActionWanModel(replace(TINY_WORLD, dim=64, ffn_dim=128))',
      'write_safetensors(sys.argv[1], m.state_dict())',
    ].join('\n');
    const r = spawnSync(PY, ['-c', code, join(dir, 'other.safetensors')], { cwd: join(app, 'python'), encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    const bad = startTiny(tmpConfig(`weights: ${join(dir, 'other.safetensors')}\n`));
    await expect(bad.url).rejects.toThrow(/exited/);
    expect(await bad.exited).not.toBe(0);
    expect(bad.output()).toMatch(/key 'patch_embedding\.weight' has shape \[64, 3, 1, 8, 8\], the tiny-world config needs \[256, 3, 1, 8, 8\]/);
    expect(bad.output()).toMatch(/loading reactor-tiny-world 0\.1\.0 failed .*CheckpointError: .*other\.safetensors.*\[app_load_failed\]/);
  }, 120_000);
});
