// Python ranks that fail: crashes, faults, stalls, a dead parent, and every kind of bad input.
// Each test starts its own small runner (Python ranks without torch start in ~0.3 s).
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, symlinkSync, writeFileSync, chmodSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import {
  DistributedRunner,
  InjectedFaultError,
  PythonWorkerError,
  RankDesyncError,
  SharedMemoryCapacityError,
  WorkerCrashedError,
  WorkerStalledError,
  WorkerTimeoutError,
  pythonWorker,
} from '../src/index.js';
import { MAX_OUTPUT_LINES_PER_S } from '../src/process/worker-process.js';
import { captureLogger, eventually, expectNothingLeft, quiet, rankProcesses, segments, trackRunners, useTempDirs } from './helpers.js';
import { FIXTURES, PY } from './python-helpers.js';

const track = trackRunners();
const tempDir = useTempDirs();

function echo(worldSize: number, extra: Record<string, unknown> = {}, target = 'echo_worker:EchoWorker', interpreter = PY) {
  return track(new DistributedRunner<any, any, any>(pythonWorker(target, { path: [FIXTURES], interpreter }), { worldSize, logger: quiet, ...extra }));
}

async function rejection(p: Promise<unknown>): Promise<any> {
  return p.then(
    () => {
      throw new Error('expected a rejection');
    },
    (e: unknown) => e,
  );
}

describe('Python ranks that crash', () => {
  it('a crash fault from REACTOR_FAULTS: WorkerCrashedError naming the rank and exit code, rankExit, nothing left', async () => {
    process.env.REACTOR_FAULTS = JSON.stringify([{ rank: 1, call: 2, kind: 'crash' }]);
    let runner: DistributedRunner<any, any, any>;
    try {
      runner = echo(2);
    } finally {
      delete process.env.REACTOR_FAULTS;
    }
    await runner.start();
    const exits: unknown[] = [];
    runner.on('rankExit', (i) => exits.push(i));
    await runner.generate({});
    const err = await rejection(runner.generate({}));
    expect(err).toBeInstanceOf(WorkerCrashedError);
    expect(err).toMatchObject({ rank: 1, exitCode: 86, during: 'generate' });
    expect(err.stderrTail.join('\n')).toMatch(/injected fault: crash on rank 1 at generate\(\) call 2/);
    expect(exits).toMatchObject([{ rank: 1, exitCode: 86 }]);
    expect(runner.healthy).toBe(false);
    await runner.shutdown();
    expectNothingLeft(runner);
  });

  it('a slow fault: from the chosen call on, each generate() of the rank sleeps ms first and succeeds', async () => {
    const log = captureLogger();
    const runner = echo(2, { logger: log, faults: [{ rank: 0, call: 2, kind: 'slow', ms: 300 }] });
    await runner.start();
    await runner.generate({});
    for (let i = 0; i < 2; i++) {
      const t0 = performance.now();
      await runner.generate({});
      // A sleep's floor, not a speed figure: the call cannot answer before rank 0 slept.
      expect(performance.now() - t0).toBeGreaterThanOrEqual(290);
    }
    await log.waitFor(/injected fault: slow \(300 ms before each generate\(\)\) on rank 0 from generate\(\) call 2/);
    expect(runner.healthy).toBe(true);
    await runner.shutdown();
    expectNothingLeft(runner);
  });

  it('a rank SIGKILLed mid-step is reported within milliseconds; nothing left', async () => {
    const runner = echo(2);
    await runner.start();
    const call = rejection(runner.generate({ sleepMs: 5000 }));
    await new Promise((r) => setTimeout(r, 100));
    const t0 = performance.now();
    process.kill(runner.pids[1]!, 'SIGKILL');
    const err = await call;
    const ms = performance.now() - t0;
    expect(err).toBeInstanceOf(WorkerCrashedError);
    expect(err).toMatchObject({ rank: 1, signal: 'SIGKILL', during: 'generate' });
    // The exit event, not the 5 s stall watch nor the step's 5 s sleep; room for a loaded machine.
    expect(ms).toBeLessThan(2500);
    await runner.shutdown();
    expectNothingLeft(runner);
  });

  for (const [how, input] of [
    ['sys.exit(0)', { exitOn: [0], exitCode: 0 }],
    ['os._exit(0)', { osExitOn: [0], exitCode: 0 }],
  ] as const) {
    it(`a rank that exits 0 in the middle of a call (${how}) is a crash, not a result`, async () => {
      const runner = echo(1);
      await runner.start();
      const err = await rejection(runner.generate(input));
      expect(err).toBeInstanceOf(WorkerCrashedError);
      expect(err).toMatchObject({ rank: 0, exitCode: 0, signal: null, during: 'generate' });
      expect(err.message).toMatch(/Rank 0 \(pid \d+\) exited with code 0 during generate\(\)/);
      await runner.shutdown();
      expectNothingLeft(runner);
    });
  }

  it('a segfault is a crash whose report carries the Python stack (faulthandler)', async () => {
    const runner = echo(1);
    await runner.start();
    const err = await rejection(runner.generate({ segfaultOn: [0] }));
    expect(err).toBeInstanceOf(WorkerCrashedError);
    expect(err.signal).toBe('SIGSEGV');
    expect(err.stderrTail.join('\n')).toMatch(/Fatal Python error: Segmentation fault[\s\S]*echo_worker\.py", line \d+ in generate/);
    await runner.shutdown();
    expectNothingLeft(runner);
  });
});

describe('a Python rank that floods its output', () => {
  it('51,200 lines of 1 KiB in load() reach the log at most MAX_OUTPUT_LINES_PER_S a second, the rest counted in "N lines dropped" lines', async () => {
    const log = captureLogger();
    const lines = 51_200;
    const runner = track(
      new DistributedRunner<any, any, any>(pythonWorker('flood_worker:FloodWorker', { path: [FIXTURES], interpreter: PY }), {
        worldSize: 1,
        logger: log,
        loadArgs: { lines, width: 1024 },
      }),
    );
    const t0 = performance.now();
    await runner.start();
    const seconds = (performance.now() - t0) / 1000;
    // The flood's lines, then one stderr line: each is passed on or counted in a "dropped" line,
    // which comes when its second is over even though nothing follows the flood.
    const passed = () => log.lines.filter((l) => /^info \[rank 0\] \d{7} x+$/.test(l) || l === 'warn [rank 0] flood done').length;
    const dropped = () =>
      log.lines.reduce((n, l) => n + Number(/^warn \[rank 0\] \.\.\. (\d+) lines? of rank output dropped \(over 200 lines a second\)$/.exec(l)?.[1] ?? 0), 0);
    await eventually(() => passed() + dropped() >= lines + 1, 10_000, 'every line passed on or counted');
    expect(passed() + dropped()).toBe(lines + 1);
    expect(passed()).toBeLessThanOrEqual(MAX_OUTPUT_LINES_PER_S * (Math.ceil(seconds) + 2));
    expect(dropped()).toBeGreaterThan(lines / 2);
    expect(log.lines.join('\n').length).toBeLessThan(lines * 1024 * 0.1);
    await runner.shutdown();
  });
});

describe('Python ranks under fault injection', () => {
  it('hang: WorkerTimeoutError after callTimeoutMs; the silent rank is killed', async () => {
    const runner = echo(2, { faults: [{ rank: 1, call: 1, kind: 'hang' }], callTimeoutMs: 1500 });
    await runner.start();
    const err = await rejection(runner.generate({}));
    expect(err).toBeInstanceOf(WorkerTimeoutError);
    expect(err.ranks).toEqual([1]);
    await runner.shutdown();
    expectNothingLeft(runner);
  });

  it('stall (SIGSTOP): a stall event naming the rank, then WorkerStalledError', async () => {
    const runner = echo(2, { faults: [{ rank: 1, call: 1, kind: 'stall' }], stallMs: 400, stallTimeoutMs: 1200 });
    await runner.start();
    const stalls: unknown[] = [];
    runner.on('stall', (s) => stalls.push(s));
    const err = await rejection(runner.generate({}));
    expect(err).toBeInstanceOf(WorkerStalledError);
    expect(err.ranks).toEqual([1]);
    expect(stalls).toMatchObject([{ rank: 1, phase: 'generate' }]);
    await runner.shutdown();
    expectNothingLeft(runner);
  });

  it('a rank blocked in a sleep (no CPU time, no Python progress) is named by the stall detector', async () => {
    const runner = echo(2, { stallMs: 400 });
    await runner.start();
    const stalls: { rank: number }[] = [];
    runner.on('stall', (s) => stalls.push(s));
    // Both ranks sleep 1.5 s in time.sleep (as a rank waits in a collective): both stall, both recover.
    const r = await runner.generate({ sleepMs: 1500 });
    expect(r.rank).toBe(0);
    expect(stalls.map((s) => s.rank).sort()).toEqual([0, 1]);
    expect(runner.healthy).toBe(true);
  });

  it('an idle Python rank is not a stall (as a TypeScript one); a frozen idle rank (SIGSTOP) is named, and clears on SIGCONT', async () => {
    const runner = echo(2, { stallMs: 300 });
    await runner.start();
    await runner.generate({});
    const stalls: { rank: number; phase: string }[] = [];
    const cleared: number[] = [];
    runner.on('stall', (s) => stalls.push(s));
    runner.on('stallCleared', (r) => cleared.push(r));
    // Idle for five times stallMs (the idle watch reads every 75 ms): nothing reported.
    const until = performance.now() + 1500;
    while (performance.now() < until) {
      expect(runner.stalledRanks).toEqual([]);
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(stalls).toEqual([]);
    process.kill(runner.pids[1]!, 'SIGSTOP');
    try {
      await eventually(() => stalls.length > 0, 10_000, 'the stall of the stopped idle rank');
      expect(stalls).toMatchObject([{ rank: 1, phase: 'idle' }]);
      expect(runner.stalledRanks).toMatchObject([{ rank: 1, phase: 'idle' }]);
    } finally {
      process.kill(runner.pids[1]!, 'SIGCONT');
    }
    await eventually(() => cleared.includes(1), 10_000, 'the stall to clear');
    expect(runner.healthy).toBe(true);
    expect((await runner.generate({})).rank).toBe(0);
  });

  it('a rank waiting inside a torch.distributed collective is named, in phase collective, long before any NCCL/gloo timeout', async () => {
    const runner = echo(2, { stallMs: 400 }, 'collective_worker:CollectiveWorker');
    await runner.start();
    const stalls: { rank: number; phase: string }[] = [];
    runner.on('stall', (s) => stalls.push(s));
    // Rank 1 computes (in Python) for 1.2 s before it joins all_gather; rank 0 waits inside it.
    const r = await runner.generate({ spinOn: [1], ms: 1200 });
    expect(r.backend).toBe('gloo');
    expect([...r.gathered]).toEqual([0, 0, 1, 1]);
    expect(stalls).toMatchObject([{ rank: 0, phase: 'collective' }]);
    expect(runner.healthy).toBe(true);
  });

  it('throw on every rank: InjectedFaultError, healthy; throw on one rank: RankDesyncError', async () => {
    const runner = echo(2, {
      faults: [
        { rank: 0, call: 1, kind: 'throw' },
        { rank: 1, call: 1, kind: 'throw' },
        { rank: 1, call: 2, kind: 'throw' },
      ],
    });
    await runner.start();
    const all = await rejection(runner.generate({}));
    expect(all).toBeInstanceOf(InjectedFaultError);
    expect(all.code).toBe('injected_fault');
    expect(runner.healthy).toBe(true);
    const one = await rejection(runner.generate({}));
    expect(one).toBeInstanceOf(RankDesyncError);
    expect(one.message).toMatch(/1 of 2 ranks failed/);
  });

  it('diverge with verifyInputs: RankDesyncError naming the rank', async () => {
    const runner = echo(2, { faults: [{ rank: 1, call: 2, kind: 'diverge' }], verifyInputs: true });
    await runner.start();
    await runner.generate({ frames: new Uint8Array([1, 2, 3]) });
    const err = await rejection(runner.generate({ frames: new Uint8Array([1, 2, 3]) }));
    expect(err).toBeInstanceOf(RankDesyncError);
    expect(err.ranks).toEqual([1]);
  });

  it('shm_full on rank 0: SharedMemoryCapacityError for its result, the runner stays healthy', async () => {
    const runner = echo(1, { faults: [{ rank: 0, call: 1, kind: 'shm_full' }] });
    await runner.start();
    const err = await rejection(runner.generate({ payloadBytes: 1 << 20 }));
    expect(err).toBeInstanceOf(SharedMemoryCapacityError);
    expect(err.message).toMatch(/injected shm_full fault/);
    expect(runner.healthy).toBe(true);
    expect((await runner.generate({ payloadBytes: 1 << 20 })).frames.byteLength).toBe(1 << 20);
  });
});

describe('Python ranks whose parent dies', () => {
  const parents: ChildProcess[] = [];
  afterEach(() => {
    for (const p of parents.splice(0)) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  });

  async function startParent(mode: 'wait' | 'loop'): Promise<{ proc: ChildProcess; pids: number[]; prefix: string }> {
    const script = fileURLToPath(new URL('./fixtures/python-parent.mjs', import.meta.url));
    const proc = spawn(process.execPath, [script, mode], { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, REACTOR_PYTHON: PY } });
    parents.push(proc);
    let buf = '';
    return new Promise((resolve, reject) => {
      proc.stdout!.setEncoding('utf8');
      proc.stdout!.on('data', (c: string) => {
        buf += c;
        const line = buf.split('\n').find((l) => l.startsWith('{'));
        if (line) resolve({ proc, ...(JSON.parse(line) as { pids: number[]; prefix: string }) });
      });
      proc.on('exit', (code, signal) => reject(new Error(`parent exited early (${code}, ${signal})`)));
    });
  }

  for (const mode of ['wait', 'loop'] as const) {
    it(`ranks exit by themselves when the parent is SIGKILLed ${mode === 'loop' ? 'mid-step' : 'while idle'}, and unlink every segment`, async () => {
      const { proc, pids, prefix } = await startParent(mode);
      expect(segments(prefix).length).toBeGreaterThan(0);
      proc.kill('SIGKILL');
      expect(pids).toHaveLength(2);
      // (an exited rank is a zombie until init reaps it: rankProcesses() does not count those)
      await eventually(() => rankProcesses(prefix).length === 0, 2000, 'every Python rank exiting');
      expect(segments(prefix)).toEqual([]);
    });
  }
});

describe('bad input to a Python worker', () => {
  it('a module that does not exist: python_worker_not_found naming the module and the import path; nothing left', async () => {
    const runner = echo(2, {}, 'no_such_module:Worker');
    const err = await rejection(runner.start());
    expect(err).toBeInstanceOf(PythonWorkerError);
    expect(err.code).toBe('python_worker_not_found');
    expect(err.message).toMatch(/No Python module named 'no_such_module'[\s\S]*pythonWorker\('no_such_module:Worker', \{ path: \[\.\.\.\] \}\)/);
    expectNothingLeft(runner);
  });

  it('a module-name typo: "did you mean" naming the module that is there and its file, not "add the folder"; said once for 2 ranks', async () => {
    const log = captureLogger();
    const runner = echo(2, { logger: log }, 'echo_wroker:EchoWorker');
    const err = await rejection(runner.start());
    // The error says it; the log does not repeat it per rank (or per line of the rank's stderr).
    expect(err.message.match(/Did you mean/g)).toHaveLength(1);
    expect(log.lines.join('\n').match(/Did you mean/g), log.lines.join('\n')).toHaveLength(1);
    expect(err).toBeInstanceOf(PythonWorkerError);
    expect(err.code).toBe('python_worker_not_found');
    expect(err.message).toMatch(
      /No Python module named 'echo_wroker' for rank \d .*\. Did you mean 'echo_worker' \(\S+fixtures\/python\/echo_worker\.py\)\? Fix the name in pythonWorker\('echo_wroker:EchoWorker'\)/,
    );
    expect(err.message).not.toMatch(/Add the folder/);
    expectNothingLeft(runner);
  });

  it('a syntax error in the worker module: python_worker_invalid naming the file, the line and its source, on every rank', async () => {
    const dir = tempDir('reactor-pysyntax-');
    writeFileSync(
      join(dir, 'broken_worker.py'),
      'from reactor_worker import DistributedWorker\n\nclass BrokenWorker(DistributedWorker):\n    def load(self:\n        pass\n',
    );
    const runner = track(
      new DistributedRunner<any, any, any>(pythonWorker('broken_worker:BrokenWorker', { path: [dir], interpreter: PY }), { worldSize: 2, logger: quiet }),
    );
    const err = await rejection(runner.start());
    expect(err).toBeInstanceOf(PythonWorkerError);
    expect(err.code).toBe('python_worker_invalid');
    expect(err.message).toMatch(
      new RegExp(`^The worker module broken_worker does not parse on rank \\d: .* in ${dir}/broken_worker\\.py, line 4\\n    def load\\(self:\\n`),
    );
    expectNothingLeft(runner);
  });

  it('a raise in reset() on every rank is rethrown (healthy); on one rank it is a RankDesyncError naming it; each with file and line', async () => {
    const dir = tempDir('reactor-pyreset-');
    writeFileSync(
      join(dir, 'reset_worker.py'),
      'from reactor_worker import DistributedWorker\n\nclass ResetWorker(DistributedWorker):\n    def load(self):\n        self.resets = 0\n    def generate(self, input):\n        self.raise_on = input["raiseOn"]\n        return {}\n    def reset(self):\n        if self.rank in self.raise_on:\n            raise KeyError(f"no state on rank {self.rank}")\n',
    );
    const runner = track(
      new DistributedRunner<any, any, any>(pythonWorker('reset_worker:ResetWorker', { path: [dir], interpreter: PY }), { worldSize: 2, logger: quiet }),
    );
    await runner.start();
    await runner.generate({ raiseOn: [0, 1] });
    const all = await rejection(runner.reset());
    expect(all).toMatchObject({ name: 'KeyError', rank: 0 });
    expect(all.rankStack).toMatch(/reset_worker\.py", line 11, in reset\n\s+raise KeyError/);
    expect(runner.healthy).toBe(true);
    await runner.generate({ raiseOn: [1] });
    const one = await rejection(runner.reset());
    expect(one).toBeInstanceOf(RankDesyncError);
    expect(one.message).toMatch(/rank 1: threw KeyError: 'no state on rank 1'/);
    expect(one.cause.rankStack).toMatch(/reset_worker\.py", line 11, in reset/);
    expect(runner.healthy).toBe(false);
  });

  it('CUDA asked for on a CPU rank: the error says the rank runs on CPU and to use self.device', async () => {
    const dir = tempDir('reactor-pycuda-');
    writeFileSync(
      join(dir, 'cuda_worker.py'),
      'import torch\nfrom reactor_worker import DistributedWorker\n\nclass CudaWorker(DistributedWorker):\n    def load(self):\n        self.weights = torch.zeros(4, device="cuda")\n    def generate(self, input):\n        return {}\n',
    );
    const runner = track(
      new DistributedRunner<any, any, any>(pythonWorker('cuda_worker:CudaWorker', { path: [dir], interpreter: PY }), {
        worldSize: 1,
        devices: 'cpu',
        logger: quiet,
      }),
    );
    const err = await rejection(runner.start());
    expect(err.rank).toBe(0);
    expect(err.message).toMatch(/\(rank 0 runs on CPU: it has no GPU \(CUDA_VISIBLE_DEVICES is empty\)\. Put tensors on self\.device, not 'cuda'/);
    expect(err.rankStack).toMatch(/cuda_worker\.py", line 6, in load/);
    expectNothingLeft(runner);
  });

  it('a class that does not exist, one that is not a DistributedWorker, one that needs constructor arguments', async () => {
    const cases: [string, string, RegExp][] = [
      ['echo_worker:Missing', 'python_worker_not_found', /has no Missing\. DistributedWorker classes it defines: EchoWorker, NeedsArgs, TypedWorker/],
      ['echo_worker:NotAWorker', 'python_worker_invalid', /echo_worker:NotAWorker is a class deriving from object, not a DistributedWorker/],
      ['echo_worker:Step', 'python_worker_invalid', /not a DistributedWorker/],
      ['echo_worker:NeedsArgs', 'python_worker_invalid', /needs a no-argument constructor/],
    ];
    for (const [target, code, re] of cases) {
      const runner = echo(1, {}, target);
      const err = await rejection(runner.start());
      expect(err).toBeInstanceOf(PythonWorkerError);
      expect(err.code).toBe(code);
      expect(err.message).toMatch(re);
      expectNothingLeft(runner);
    }
  });

  it('an exception in load() fails start() with its traceback; nothing left', async () => {
    const runner = echo(2, { loadArgs: { throwInLoad: true } });
    const err = await rejection(runner.start());
    expect(err.name).toBe('ValueError');
    expect(err.message).toMatch(/bad weights on rank [01]/);
    expect(err.rankStack).toMatch(/Traceback[\s\S]*echo_worker\.py", line \d+, in load/);
    expect(err.stack).toMatch(/echo_worker\.py/);
    expectNothingLeft(runner);
  });

  it('an interpreter that does not exist: python_not_found at construction, naming REACTOR_PYTHON', () => {
    let err: any;
    try {
      new DistributedRunner(pythonWorker('echo_worker:EchoWorker'), { worldSize: 1, logger: quiet, env: { REACTOR_PYTHON: '/nonexistent/python3' } });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(PythonWorkerError);
    expect(err.code).toBe('python_not_found');
    expect(err.message).toMatch(/"\/nonexistent\/python3" \(REACTOR_PYTHON\) was not found/);
  });

  it('a Python without NumPy: python_environment naming NumPy and the fix', async () => {
    // The same Python without its site-packages (-S): no NumPy there.
    const dir = tempDir('reactor-nonumpy-');
    const bare = join(dir, 'python3');
    writeFileSync(bare, `#!/bin/sh\nexec ${PY} -S "$@"\n`);
    chmodSync(bare, 0o755);
    const runner = echo(1, {}, 'echo_worker:EchoWorker', bare);
    const err = await rejection(runner.start());
    expect(err).toBeInstanceOf(PythonWorkerError);
    expect(err.code).toBe('python_environment');
    expect(err.message).toMatch(/NumPy is not installed for .* and Python ranks need it[\s\S]*REACTOR_PYTHON/);
    expectNothingLeft(runner);
  });

  it('a torch worker on a Python without torch: python_environment naming torch', async () => {
    // NumPy but no torch: -S, and only NumPy's package folder on the path.
    const dir = tempDir('reactor-notorch-');
    const site = join(dir, 'site');
    mkdirSync(site);
    const numpyDir = await new Promise<string>((resolve, reject) => {
      const p = spawn(PY, ['-c', 'import numpy, os; print(os.path.dirname(numpy.__file__))']);
      let out = '';
      p.stdout.on('data', (d: Buffer) => (out += d.toString()));
      p.on('exit', (code) => (code === 0 ? resolve(out.trim()) : reject(new Error('no numpy'))));
    });
    symlinkSync(numpyDir, join(site, 'numpy'));
    const bare = join(dir, 'python3');
    writeFileSync(bare, `#!/bin/sh\nexec ${PY} -S "$@"\n`);
    chmodSync(bare, 0o755);
    const runner = track(
      new DistributedRunner(pythonWorker('torch_worker:TorchWorker', { path: [FIXTURES, site], interpreter: bare }), { worldSize: 1, logger: quiet }),
    );
    const err = await rejection(runner.start());
    expect(err).toBeInstanceOf(PythonWorkerError);
    expect(err.code).toBe('python_environment');
    expect(err.message).toMatch(/The worker module torch_worker imports torch, which is not installed for .*apt-get install python3-torch/);
    expectNothingLeft(runner);
  });

  it('a malformed target, loadArgs that are not an object, an import path that does not exist: TypeError at once', () => {
    expect(() => pythonWorker('video_worker.VideoWorker')).toThrow(/a Python worker is named 'module:Class'/);
    expect(() => new DistributedRunner(pythonWorker('echo_worker:EchoWorker', { interpreter: PY }), { worldSize: 1, loadArgs: [1, 2] as any })).toThrow(
      /reach load\(\*\*kwargs\) as keyword arguments, so they must be an object/,
    );
    expect(() => new DistributedRunner(pythonWorker('echo_worker:EchoWorker', { interpreter: PY, path: ['/no/such/dir'] }), { worldSize: 1 })).toThrow(
      /The Python import path \/no\/such\/dir .* does not exist/,
    );
  });
});

// Logged output of a failing load names the rank (the capture logger is used to check it once).
describe('a Python rank that writes to stderr before failing', () => {
  it('is logged with its rank, and so is the traceback of its load()', async () => {
    const log = captureLogger();
    const runner = track(
      new DistributedRunner(pythonWorker('echo_worker:EchoWorker', { path: [FIXTURES], interpreter: PY }), {
        worldSize: 1,
        logger: log,
        loadArgs: { throwInLoad: true },
      }),
    );
    await rejection(runner.start());
    await log.waitFor(/^warn \[rank 0\] warn from rank 0$/);
    // ...and so is the traceback of the failed load(), whatever the app does with the error: once,
    // in the runner's line (the rank does not print it to its stderr as well).
    const line = await log.waitFor(/^error rank 0 \(pid \d+\): load\(\) threw ValueError: bad weights on rank 0\n/);
    expect(line).toMatch(/\n {2}File ".*echo_worker\.py", line \d+, in load\n/);
    expect(log.lines.join('\n').match(/bad weights on rank 0/g)).toHaveLength(1);
  });
});
