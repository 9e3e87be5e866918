// Issue 39, point 4: the world model as a pipeline over two CPU ranks (gloo), both shapes (the
// DiT's blocks split; the denoising steps split), with calls in flight: the same frames and
// latents as one rank, bit for bit, through a prompt change (the re-cache crosses the stages).
import { describe, expect, it } from 'vitest';
import { DistributedRunner, pythonWorker } from '@reactor/distributed';
import { WORLD_PYTHON_DIR, WORLD_WORKER } from '../src/app.js';
import { PY } from './helpers.js';

interface Chunk {
  frames: Uint8Array;
  latentHash: string;
  chunk: number;
  recached: boolean;
}

const CHUNKS = 4;
const quiet = { debug() {}, info() {}, warn() {}, error() {}, child: () => quiet };
/** The prompt of chunk i: a change at chunk 2 re-caches the kept frames under the new one. */
const prompt = (i: number) => (i < 2 ? 'a forest at dawn' : 'a river at night');

function world(worldSize: number, pipeline: string, extra: Record<string, unknown> = {}) {
  const worker = pythonWorker<any, any, any>(WORLD_WORKER, { path: [WORLD_PYTHON_DIR], interpreter: PY });
  return new DistributedRunner(worker, {
    worldSize,
    devices: 'cpu',
    logger: quiet,
    callTimeoutMs: 60_000,
    // One thread a rank: the same float operations in the same order as the one-rank reference.
    loadArgs: { model: 'small', compile: 'off', warmup: false, threads: 1, pipeline },
    maxInFlight: 2,
    ...(worldSize > 1 && { outputRank: worldSize - 1 }),
    ...extra,
  });
}

/** Every chunk, with up to two calls in flight. */
async function chunks(runner: DistributedRunner<any, any, any>): Promise<Chunk[]> {
  await runner.start();
  try {
    const out: Chunk[] = [];
    const pending: Promise<Chunk>[] = [];
    for (let i = 0; i < CHUNKS; i++) {
      pending.push(runner.generate({ prompt: prompt(i), seed: 7 }));
      if (pending.length === 2 || i === CHUNKS - 1) out.push(await pending.shift()!);
    }
    for (const p of pending) out.push(await p);
    return out;
  } finally {
    await runner.shutdown();
  }
}

describe('the world model as a pipeline over ranks', () => {
  it('gives the one-rank frames with its blocks split, and with its steps split', async () => {
    const reference = await chunks(world(1, 'none'));
    expect(reference.map((c) => c.recached)).toEqual([false, false, true, false]);
    for (const shape of ['blocks', 'steps']) {
      const got = await chunks(world(2, shape));
      expect(
        got.map((c) => c.chunk),
        shape,
      ).toEqual([0, 1, 2, 3]);
      expect(
        got.map((c) => c.latentHash),
        shape,
      ).toEqual(reference.map((c) => c.latentHash));
      for (let i = 0; i < CHUNKS; i++) expect(Buffer.compare(Buffer.from(got[i]!.frames), Buffer.from(reference[i]!.frames)), `${shape} chunk ${i}`).toBe(0);
    }
  }, 180_000);

  it('a cancelled chunk (an urgent prompt change) leaves nothing behind: the next call makes that chunk with the new prompt', async () => {
    const reference = world(1, 'none');
    await reference.start();
    const want: Chunk[] = [
      await reference.generate({ prompt: 'a forest at dawn', seed: 7 }),
      await reference.generate({ prompt: 'a river at night', seed: 7 }),
    ];
    await reference.shutdown();
    const runner = world(1, 'none');
    await runner.start();
    try {
      const first: Chunk = await runner.generate({ prompt: 'a forest at dawn', seed: 7 });
      // Cancelled as soon as it is sent: the worker stops before its first DiT pass of chunk 1.
      const ac = new AbortController();
      const cancelled = runner.generate({ prompt: 'a forest at dawn', seed: 7 }, { signal: ac.signal });
      ac.abort(new Error('an urgent change'));
      await expect(cancelled).rejects.toMatchObject({ code: 'call_aborted', runnerUsable: true });
      const next: Chunk = await runner.generate({ prompt: 'a river at night', seed: 7 });
      expect([first.latentHash, next.chunk, next.recached, next.latentHash]).toEqual([want[0]!.latentHash, 1, true, want[1]!.latentHash]);
    } finally {
      await runner.shutdown();
    }
  }, 60_000);

  it('refuses a pipeline whose answer is not its last stage, and ranks without a pipeline', async () => {
    await expect(world(2, 'blocks', { outputRank: 0 }).start()).rejects.toMatchObject({
      name: 'ConfigError',
      message: expect.stringContaining("a pipeline's frames come from its last stage: set the runner's outputRank to 1 (it is 0)"),
    });
    await expect(world(2, 'none', { outputRank: 1 }).start()).rejects.toMatchObject({
      message: expect.stringContaining('set worldSize: 1, or pipeline: blocks or steps'),
    });
  }, 60_000);
});
