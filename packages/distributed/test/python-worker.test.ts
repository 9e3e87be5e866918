// Python ranks under DistributedRunner: the same contract as TypeScript ranks (docs/runner.md,
// "Python workers"). The ranks are real Python processes (REACTOR_PYTHON, default
// /usr/bin/python3 here: the Python with Debian's NumPy and torch). One 2-rank runner serves
// the tests that leave it healthy; the tests that break it come last.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CallAbortedError, DistributedRunner, PythonWorkerError, RankDesyncError, pythonWorker } from '../src/index.js';
import { captureLogger, expectNothingLeft } from './helpers.js';
import { FIXTURES, PY } from './python-helpers.js';

class RolloutExhausted extends Error {}

describe('DistributedRunner with a Python worker (2 ranks)', () => {
  const log = captureLogger();
  let runner: DistributedRunner<any, any, any>;

  beforeAll(async () => {
    runner = new DistributedRunner(pythonWorker('echo_worker:EchoWorker', { path: [FIXTURES], errors: { RolloutExhausted } }), {
      worldSize: 2,
      loadArgs: { weights_root: '/weights/here', tag: 'x' },
      logger: log,
      // The interpreter through the documented variable (options.env is the ranks' environment).
      env: { REACTOR_PYTHON: PY },
    });
    await runner.start();
  });
  afterAll(async () => {
    await runner.shutdown();
    expectNothingLeft(runner);
  });

  it('sends the same input to every rank, returns rank 0 result, keeps state between calls', async () => {
    const a = await runner.generate({ prompt: 'forest', n: 3, nested: { list: [1, 'two', null, true] } });
    const b = await runner.generate({ prompt: 'sea' });
    expect(a).toMatchObject({
      rank: 0,
      worldSize: 2,
      device: 'cpu',
      isLeader: true,
      steps: 1,
      input: { prompt: 'forest', n: 3, nested: { list: [1, 'two', null, true] } },
    });
    expect(b.steps).toBe(2);
    // loadArgs reach load(**kwargs); a parameter annotated Path arrives as a Path.
    expect(a.weightsRoot).toEqual(['PosixPath', '/weights/here']);
    // torch.distributed's rendezvous variables, one per rank; CPU ranks see no GPU.
    expect(a.env).toMatchObject({ RANK: '0', LOCAL_RANK: '0', WORLD_SIZE: '2', MASTER_ADDR: '127.0.0.1', CUDA_VISIBLE_DEVICES: '' });
    expect(Number(a.env.MASTER_PORT)).toBeGreaterThan(0);
  });

  it('typed arrays arrive as writable NumPy views and NumPy results come back as typed arrays', async () => {
    const r = await runner.generate({ frames: Uint8Array.from([1, 2, 250]) });
    expect(r.dtype).toBe('uint8');
    expect(r.writeable).toBe(true);
    expect(r.view).toBe(true);
    expect(r.doubled).toBeInstanceOf(Float32Array);
    expect([...r.doubled]).toEqual([2, 4, 500]);
  });

  it('a CPU torch tensor in a result arrives as a typed array of its dtype', async () => {
    const r = await runner.generate({ tensor: true });
    expect(r.t).toBeInstanceOf(Float32Array);
    expect([...r.t]).toEqual([0, 1.5, 3, 4.5]);
  });

  it('a dataclass result travels as a plain object', async () => {
    expect(await runner.generate({ dataclass: true })).toEqual({ prompt: 'p', seed: 3 });
  });

  it('result_array() results are read in place: generateView() gives views of shared memory, generate() a copy', async () => {
    const bytes = 3 << 20;
    const view = await runner.generateView({ payloadBytes: bytes });
    expect(view.value.frames).toBeInstanceOf(Uint8Array);
    expect(view.value.frames.byteLength).toBe(bytes);
    const first = view.value.frames[0];
    const owned = await runner.generate({ payloadBytes: bytes });
    expect(view.valid).toBe(false);
    expect(owned.frames[0]).toBe((first + 1) & 0xff);
  });

  it('an exception of the same type on every rank reaches the caller with the Python type, message, traceback and fields; the runner stays healthy', async () => {
    const err = await runner.generate({ throwOn: [0, 1] }).catch((e: unknown) => e as any);
    expect(err).toBeInstanceOf(RolloutExhausted);
    expect(err.name).toBe('RolloutExhausted');
    expect(err.message).toBe('exhausted on rank 0');
    expect(err.chunk).toBe(7);
    expect(err.pythonType).toBe('echo_worker.RolloutExhausted');
    expect(err.rankStack).toMatch(
      /Traceback \(most recent call last\):[\s\S]*echo_worker\.py", line \d+, in generate[\s\S]*RolloutExhausted: exhausted on rank 0/,
    );
    expect(runner.healthy).toBe(true);
    expect((await runner.generate({})).rank).toBe(0);
  });

  it('reset() runs on every rank with the same outcome policy', async () => {
    await runner.reset();
    const r = await runner.generate({});
    expect(r.resets).toBe(1);
    expect(r.steps).toBe(1);
  });

  it('a result that cannot travel is a clear python_value error naming the field and the fix; the runner stays healthy', async () => {
    const cases: [string, RegExp][] = [
      ['object', /result\.thing is a builtins\.object, which cannot travel/],
      ['noncontiguous', /result\.frames is a non-contiguous array[\s\S]*np\.ascontiguousarray/],
      ['bool', /result\.mask is a bool array[\s\S]*astype\(np\.uint8\)/],
      ['nan', /result\.score is nan/],
      ['device', /result\.frames is a torch tensor on meta: only CPU memory can travel\. Send frames\.cpu\(\)/],
      [
        'bfloat16',
        /result\.frames is a bfloat16 torch tensor, which has no TypeScript typed array: convert it where it leaves the model, frames\.float\(\) \(float32\), or frames as \(frames\.clamp\(0, 1\) \* 255\)\.to\(torch\.uint8\)/,
      ],
      ['float16', /result\.frames is a float16 torch tensor, which has no TypeScript typed array: .*frames\.float\(\)/],
      [
        'np_float16',
        /result\.frames is a float16 array, which cannot travel: float16 has no TypeScript typed array: send arr\.astype\(np\.float32\), frames as \(arr\.clip\(0, 1\) \* 255\)\.astype\(np\.uint8\)/,
      ],
    ];
    for (const [bad, re] of cases) {
      const err = await runner.generate({ bad }).catch((e: unknown) => e as any);
      expect(err).toBeInstanceOf(PythonWorkerError);
      expect(err.code).toBe('python_value');
      expect(err.message).toMatch(re);
      expect(runner.healthy).toBe(true);
    }
  });

  it('half-float results travel where the app declares halfPrecision (float32: the values; uint8: frames in [0, 1] as bytes), and the refusal names the declaration', async () => {
    const refused = await runner.generate({ half: true }).catch((e: unknown) => e as any);
    expect(refused.code).toBe('python_value');
    expect(refused.message).toContain("or declare pythonWorker(..., { halfPrecision: 'float32' }) (or 'uint8' for frames in [0, 1]) and the rank converts");
    expect(() => pythonWorker('echo_worker:EchoWorker', { halfPrecision: 'f16' as never })).toThrow(/halfPrecision must be 'float32' .* or 'uint8'/);
    const declared = (halfPrecision: 'float32' | 'uint8') =>
      new DistributedRunner<any, any, any>(pythonWorker('echo_worker:EchoWorker', { path: [FIXTURES], halfPrecision }), {
        worldSize: 1,
        loadArgs: {},
        logger: log,
        env: { REACTOR_PYTHON: PY },
      });
    const [wide, bytes] = [declared('float32'), declared('uint8')];
    try {
      await Promise.all([wide.start(), bytes.start()]);
      const f = await wide.generate({ half: true });
      expect(f.t).toBeInstanceOf(Float32Array);
      expect(f.a).toBeInstanceOf(Float32Array);
      expect(Array.from(f.t)).toEqual([0, 0.25, 0.5, 1, 1.5, -0.5]);
      expect(Array.from(f.a)).toEqual([0, 0.25, 0.5, 1, 1.5, -0.5]);
      const b = await bytes.generate({ half: true });
      expect(b.t).toBeInstanceOf(Uint8Array);
      // round(clamp(x, 0, 1) * 255): 63.75 -> 64, 127.5 -> 128 (to even), 1.5 -> 255, -0.5 -> 0.
      expect(Array.from(b.t)).toEqual([0, 64, 128, 255, 255, 0]);
      expect(Array.from(b.a)).toEqual([0, 64, 128, 255, 255, 0]);
    } finally {
      await Promise.all([wide.shutdown(), bytes.shutdown()]);
    }
  });

  it('an input only the v8 format carries is refused before anything is sent, naming the field', async () => {
    for (const [input, re] of [
      [{ when: new Date(0) }, /input\.when is a Date/],
      [{ x: [1, Number.NaN] }, /input\.x\[1\] is NaN/],
      [{ m: new Map() }, /input\.m is a Map/],
      [{ u: undefined }, /input\.u is undefined/],
    ] as [unknown, RegExp][]) {
      const err = await runner.generate(input).catch((e: unknown) => e as any);
      expect(err).toBeInstanceOf(PythonWorkerError);
      expect(err.code).toBe('python_value');
      expect(err.message).toMatch(re);
    }
    expect(runner.healthy).toBe(true);
    expect((await runner.generate({ ok: 1 })).input).toEqual({ ok: 1 });
  });

  it("each rank's stdout and stderr go to the logger with its rank", async () => {
    await log.waitFor(/^info \[rank 0\] loaded rank 0$/);
    await log.waitFor(/^info \[rank 1\] loaded rank 1$/);
    await log.waitFor(/^warn \[rank 1\] warn from rank 1$/);
  });

  it('a worker that prints megabytes to stdout neither blocks nor floods the log: the line is cut', async () => {
    const r = await runner.generate({ printBytes: 4 << 20 });
    expect(r.rank).toBe(0);
    const cutLine = await log.waitFor(/^info \[rank 1\] x{100,}.*line cut at 16384 characters/);
    expect(cutLine.length).toBeLessThan(17_000);
    await log.waitFor(/^info \[rank 1\] \.\.\. \(\d+ more characters of that line dropped\)/);
  });

  it('a cancelled call stops every rank (worker.signal) and leaves the runner ready', async () => {
    const ac = new AbortController();
    const p = runner.generate({ untilAborted: [0, 1] }, { signal: ac.signal });
    setTimeout(() => ac.abort(new Error('user left')), 100);
    const err = await p.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CallAbortedError);
    expect((err as CallAbortedError).runnerUsable).toBe(true);
    expect((await runner.generate({})).rank).toBe(0);
  });

  it('exceptions of different types make the runner unusable (RankDesyncError)', async () => {
    const err = await runner.generate({ throwOn: [0, 1], types: { '0': 'RolloutExhausted', '1': 'OtherModelError' } }).catch((e: unknown) => e as any);
    expect(err).toBeInstanceOf(RankDesyncError);
    expect(err.message).toMatch(/rank 1: threw OtherModelError: other on rank 1/);
    expect(runner.healthy).toBe(false);
  });
});

describe('a Python worker on the file shared-memory backend', () => {
  it('reads inputs and writes results in the file layout (no size header) as well', async () => {
    const echo = pythonWorker<Record<string, unknown>, { doubled: Uint8Array; frames: Uint8Array }>('echo_worker:EchoWorker', {
      path: [FIXTURES],
      interpreter: PY,
    });
    const runner = new DistributedRunner(echo, {
      worldSize: 1,
      shm: 'file',
      logger: captureLogger(),
    });
    try {
      await runner.start();
      expect(runner.shmBackend).toBe('file');
      const r = await runner.generate({ frames: Uint8Array.from([3, 4]) });
      expect([...r.doubled]).toEqual([6, 8]);
      const big = await runner.generate({ payloadBytes: 2 << 20 });
      expect(big.frames.byteLength).toBe(2 << 20);
      expect(big.frames[0]).toBe(2);
    } finally {
      await runner.shutdown();
    }
    expectNothingLeft(runner);
  });
});

describe('a Python worker whose generate() parameter is a dataclass', () => {
  it('gets its input as that class (and refuses fields the class does not declare)', async () => {
    const runner = new DistributedRunner(pythonWorker('echo_worker:TypedWorker', { path: [FIXTURES], interpreter: PY }), {
      worldSize: 1,
      logger: captureLogger(),
    });
    try {
      await runner.start();
      expect(await runner.generate({ prompt: 'a walk', seed: 5 })).toEqual({ cls: 'Step', prompt: 'a walk', seed: 5 });
      const err: any = await runner.generate({ prompt: 'a', colour: 'red' }).catch((e: unknown) => e);
      expect(err.name).toBe('TypeError');
      expect(err.message).toMatch(/input has field colour that Step does not declare \(it declares prompt, seed\)/);
      expect(runner.healthy).toBe(true);
    } finally {
      await runner.shutdown();
    }
    expectNothingLeft(runner);
  });
});
