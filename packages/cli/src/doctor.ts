/**
 * `reactor doctor`: checks the machine against what the app needs, before any weights load.
 * Each check says what it found and, when it fails, how to fix it.
 */
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, statfsSync } from 'node:fs';
import { delimiter } from 'node:path';
import { createServer } from 'node:net';
import { promisify } from 'node:util';
import { PYTHON_ENV, PYTHON_PACKAGE_DIR, findExecutable, pythonInterpreter } from '@reactor/distributed';
import type { AppRequirements, RequirementCheck } from '@reactor/runtime';
import { MANIFEST_FILE, type Manifest } from './manifest.js';

/** One line of `reactor doctor`'s report (the same shape as an app's own checks). */
export type DoctorCheck = RequirementCheck;

/** Minimum Node version the framework supports. */
export const MIN_NODE: readonly [number, number] = [20, 19];

export function checkNode(version = process.versions.node): DoctorCheck {
  const [maj = 0, min = 0] = version.split('.').map(Number);
  const ok = maj > MIN_NODE[0] || (maj === MIN_NODE[0] && min >= MIN_NODE[1]);
  return ok
    ? { name: 'node', status: 'ok', detail: `Node ${version}` }
    : { name: 'node', status: 'fail', detail: `Node ${version} is older than ${MIN_NODE.join('.')}`, fix: `install Node ${MIN_NODE.join('.')} or newer` };
}

export function checkShm(needBytes: number | undefined, dir = '/dev/shm'): DoctorCheck {
  if (!existsSync(dir))
    return { name: 'shared memory', status: 'fail', detail: `${dir} does not exist`, fix: 'mount a tmpfs at /dev/shm (containers: --shm-size=1g)' };
  const s = statfsSync(dir);
  const free = s.bavail * s.bsize;
  const total = s.blocks * s.bsize;
  const mb = (n: number) => `${(n / 2 ** 20).toFixed(1)} MiB`;
  if (needBytes === undefined) return { name: 'shared memory', status: 'ok', detail: `${dir}: ${mb(free)} free of ${mb(total)}` };
  if (free < needBytes) {
    return {
      name: 'shared memory',
      status: 'fail',
      detail: `${dir} has ${mb(free)} free of ${mb(total)}; the configured frames need ${mb(needBytes)}`,
      fix: `give the container more shared memory (docker run --shm-size=${Math.ceil((needBytes * 2) / 2 ** 30)}g) or lower what the app needs (its config: frame size, frames per chunk)`,
    };
  }
  return { name: 'shared memory', status: 'ok', detail: `${dir}: ${mb(free)} free of ${mb(total)}, need ${mb(needBytes)}` };
}

export async function checkPort(host: string, port: number): Promise<DoctorCheck> {
  if (port === 0) return { name: 'port', status: 'ok', detail: 'port 0: a free port is picked at start' };
  return new Promise((resolveCheck) => {
    const srv = createServer();
    srv.once('error', (err: NodeJS.ErrnoException) => {
      resolveCheck({
        name: 'port',
        status: 'fail',
        detail: `${host}:${port} is not available (${err.code ?? err.message})`,
        fix: `stop what is listening there, or pass --port <other>`,
      });
    });
    srv.listen(port, host, () => srv.close(() => resolveCheck({ name: 'port', status: 'ok', detail: `${host}:${port} is free` })));
  });
}

/**
 * Runs every check for a manifest and the app's declared requirements, then the app's own
 * checks (`requirements.checks`), then the port.
 * @param gpuCount GPUs visible to this process: the runner's count (`detectGpuCount()` of
 *   `@reactor/distributed`, which honours `REACTOR_GPU_COUNT` and `CUDA_VISIBLE_DEVICES`)
 */
export async function runDoctor(manifest: Manifest, requirements: AppRequirements, host: string, port: number, gpuCount: number): Promise<DoctorCheck[]> {
  const checks: DoctorCheck[] = [checkNode(), checkShm(requirements.shmBytes)];
  const declared = manifest.model.gpu.count;
  if (gpuCount === 0) {
    checks.push({
      name: 'gpus',
      status: declared > 0 ? 'warn' : 'ok',
      detail: `no GPU visible${declared > 0 ? ` (${MANIFEST_FILE} declares ${declared}); ranks will run on CPU` : ''}`,
    });
  } else {
    checks.push({ name: 'gpus', status: 'ok', detail: `${gpuCount} GPU(s) visible${declared > 0 ? `, ${declared} declared in ${MANIFEST_FILE}` : ''}` });
  }
  const ws = requirements.worldSize;
  if (ws !== undefined && requirements.usesGpu && gpuCount > 0 && ws > gpuCount) {
    checks.push({
      name: 'world size',
      status: 'fail',
      detail: `the app starts ${ws} ranks but ${gpuCount} GPU(s) are visible`,
      fix: `set worldSize to at most ${gpuCount} in the app config, or run ranks on CPU`,
    });
  } else if (ws !== undefined) {
    checks.push({ name: 'world size', status: 'ok', detail: `${ws} rank(s)${requirements.usesGpu ? ' on GPUs' : ' on CPU'}` });
  } else if (manifest.runtime.python) {
    // The app sizes its runner itself (the python template: one rank per declared GPU, capped by those visible).
    const ranks = gpuCount === 0 ? 1 : Math.max(1, Math.min(declared > 0 ? declared : gpuCount, gpuCount));
    checks.push(
      declared > gpuCount && gpuCount > 0
        ? {
            name: 'world size',
            status: 'warn',
            detail: `${MANIFEST_FILE} declares ${declared} GPU(s) but ${gpuCount} are visible: an app that sizes its runner by them starts ${ranks} rank(s)`,
            fix: `lower model.resources.gpu.count to ${gpuCount}, or run where ${declared} GPUs are visible`,
          }
        : {
            name: 'world size',
            status: 'ok',
            detail:
              gpuCount === 0
                ? 'no GPU visible: the ranks run on CPU'
                : `up to ${ranks} GPU rank(s) (${declared} declared in ${MANIFEST_FILE}, ${gpuCount} visible)`,
          },
    );
  }
  if (manifest.runtime.python) {
    // Two interpreters, each importing torch: side by side (half the wait on a machine of 2 cores or more).
    const [interpreter, worker] = await Promise.all([
      checkPython(process.env, manifest.runtime.python.torch, gpuCount),
      checkPythonWorker(process.env, manifest.runtime.python),
    ]);
    checks.push(...interpreter, ...worker);
  }
  checks.push(...(requirements.checks ?? []));
  checks.push(await checkPort(host, port));
  return checks;
}

/** What the interpreter of a Python worker has, as its probe prints it. */
interface PythonProbe {
  version: string;
  executable: string;
  numpy: string | null;
  numpyError?: string;
  torch?: string | null;
  torchError?: string;
  cuda?: boolean;
  cudaDevices?: number;
  nccl?: boolean;
  gloo?: boolean;
}

/** Run by the interpreter: prints one JSON line of what it has (torch only when asked). */
const PYTHON_PROBE = `
import json, sys
out = {"version": sys.version.split()[0], "executable": sys.executable, "numpy": None}
try:
    import numpy
    out["numpy"] = numpy.__version__
except Exception as e:
    out["numpyError"] = f"{type(e).__name__}: {e}"
if "--torch" in sys.argv:
    out["torch"] = None
    try:
        import torch
        out["torch"] = torch.__version__
        out["cuda"] = bool(torch.cuda.is_available())
        out["cudaDevices"] = torch.cuda.device_count() if out["cuda"] else 0
        import torch.distributed as dist
        out["nccl"] = bool(dist.is_available() and dist.is_nccl_available())
        out["gloo"] = bool(dist.is_available() and dist.is_gloo_available())
    except Exception as e:
        out["torchError"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
`;

/**
 * The checks of a Python worker's interpreter (`runtime.python` in reactor.yaml): the
 * interpreter, NumPy, and with `torch` torch itself, CUDA devices and NCCL (GPU ranks) or gloo
 * (CPU ranks). The interpreter is the one the runner would use (`REACTOR_PYTHON`, else `python3`).
 */
export async function checkPython(env: NodeJS.ProcessEnv, torch: boolean, gpuCount: number): Promise<DoctorCheck[]> {
  const named = pythonInterpreter(undefined, env);
  const path = findExecutable(named, env);
  const pick = `set ${PYTHON_ENV}=/path/to/python3 (or runtime.python.interpreter in ${MANIFEST_FILE}) to a Python that has it`;
  if (!path) {
    return [
      {
        name: 'python',
        status: 'fail',
        detail: `the Python interpreter "${named}" was not found${named.includes('/') ? '' : ' on PATH'}`,
        fix: `install Python 3 with NumPy${torch ? ' and torch' : ''} (Debian: apt-get install python3-numpy${torch ? ' python3-torch' : ''}), or ${pick}`,
      },
    ];
  }
  let probe: PythonProbe;
  try {
    const { stdout } = await promisify(execFile)(path, ['-c', PYTHON_PROBE, ...(torch ? ['--torch'] : [])], { env, timeout: 120_000 });
    probe = JSON.parse(stdout.trim().split('\n').pop() ?? '') as PythonProbe;
  } catch (err) {
    return [
      {
        name: 'python',
        status: 'fail',
        detail: `${path} did not run a Python probe: ${(err as Error).message.split('\n')[0]}`,
        fix: `point ${PYTHON_ENV} at a Python 3 interpreter`,
      },
    ];
  }
  const checks: DoctorCheck[] = [
    { name: 'python', status: 'ok', detail: `Python ${probe.version} (${probe.executable}${named !== path ? `, from "${named}"` : ''})` },
  ];
  checks.push(
    probe.numpy
      ? { name: 'numpy', status: 'ok', detail: `NumPy ${probe.numpy}` }
      : {
          name: 'numpy',
          status: 'fail',
          detail: `NumPy is not installed for ${probe.executable} (${probe.numpyError ?? 'import failed'}); Python ranks need it`,
          fix: `apt-get install python3-numpy (Debian) or pip install numpy, or ${pick}`,
        },
  );
  if (!torch) return checks;
  if (!probe.torch) {
    checks.push({
      name: 'torch',
      status: 'fail',
      detail: `torch is not installed for ${probe.executable} (${probe.torchError ?? 'import failed'})`,
      fix: `apt-get install python3-torch (Debian, CPU) or pip install torch, or ${pick}; runtime.python.torch: false if the worker does not use torch`,
    });
    return checks;
  }
  checks.push({ name: 'torch', status: 'ok', detail: `torch ${probe.torch}` });
  if (gpuCount > 0) {
    checks.push(
      probe.cuda && (probe.cudaDevices ?? 0) > 0
        ? { name: 'cuda', status: 'ok', detail: `torch sees ${probe.cudaDevices} CUDA device(s) (each rank gets one through CUDA_VISIBLE_DEVICES)` }
        : {
            name: 'cuda',
            status: 'fail',
            detail: `${gpuCount} GPU(s) visible but torch ${probe.torch} has no CUDA (a CPU build, or a driver it cannot use)`,
            fix: "install a CUDA build of torch matching the driver (nvidia-smi shows the driver's CUDA version)",
          },
    );
    checks.push(
      probe.nccl
        ? { name: 'nccl', status: 'ok', detail: 'torch.distributed has NCCL (GPU ranks use it)' }
        : {
            name: 'nccl',
            status: 'fail',
            detail: `torch ${probe.torch} has no NCCL: GPU ranks cannot run collectives`,
            fix: 'install a torch build with NCCL (the CUDA wheels from pytorch.org have it)',
          },
    );
  } else {
    checks.push(
      probe.gloo
        ? { name: 'gloo', status: 'ok', detail: 'no GPU: CPU ranks use torch.distributed with gloo' }
        : {
            name: 'gloo',
            status: 'fail',
            detail: `torch ${probe.torch} has no gloo: CPU ranks cannot run collectives`,
            fix: 'install a torch build with distributed support',
          },
    );
  }
  return checks;
}

/** Run by the interpreter: imports each module named in argv[1] (JSON), as a rank would, and prints one JSON line per module. */
const WORKER_PROBE = `
import importlib, json, sys, traceback
req = json.loads(sys.argv[1])
from reactor_worker import DistributedWorker
for module in req["modules"]:
    out = {"module": module}
    try:
        mod = importlib.import_module(module)
        out["file"] = getattr(mod, "__file__", None)
        name = req.get("className")
        if name:
            cls = getattr(mod, name, None)
            if not (isinstance(cls, type) and issubclass(cls, DistributedWorker)):
                out["error"] = f"{module} has no DistributedWorker named {name}"
    except SyntaxError as e:
        out["error"] = f"SyntaxError: {e.msg}"
        out["where"] = f"{e.filename}, line {e.lineno}"
    except BaseException as e:
        out["error"] = f"{type(e).__name__}: {e}"
        frames = traceback.extract_tb(e.__traceback__)
        inner = next((f for f in reversed(frames) if "importlib" not in f.filename), None)
        if inner is not None:
            out["where"] = f"{inner.filename}, line {inner.lineno}"
    print(json.dumps(out))
`;

/**
 * Imports the Python worker as a rank would (a syntax error, a missing import or a typo fails the
 * check, naming the file and line): the module of `runtime.python.worker`, else every top-level
 * module of the `runtime.python.path` folders. Nothing when no interpreter is found (the
 * `python` check says so) or nothing names a module.
 */
export async function checkPythonWorker(env: NodeJS.ProcessEnv, python: { path: string[]; worker?: string }): Promise<DoctorCheck[]> {
  const interpreter = findExecutable(pythonInterpreter(undefined, env), env);
  if (!interpreter) return [];
  const [module, className] = python.worker?.split(':') ?? [];
  const modules =
    module !== undefined
      ? [module]
      : python.path.flatMap((dir) => {
          try {
            return readdirSync(dir)
              .filter((f) => f.endsWith('.py') && !f.startsWith('_') && !f.startsWith('test_'))
              .map((f) => f.slice(0, -3))
              .slice(0, 20);
          } catch {
            return [];
          }
        });
  if (modules.length === 0) return [];
  const pythonPath = [PYTHON_PACKAGE_DIR.replace(/\/$/, ''), ...python.path, ...(env['PYTHONPATH'] ?? '').split(delimiter).filter(Boolean)].join(delimiter);
  let stdout: string;
  try {
    ({ stdout } = await promisify(execFile)(interpreter, ['-c', WORKER_PROBE, JSON.stringify({ modules, className: className ?? null })], {
      env: { ...env, PYTHONPATH: pythonPath, CUDA_VISIBLE_DEVICES: env['CUDA_VISIBLE_DEVICES'] ?? '' },
      timeout: 120_000,
    }));
  } catch (err) {
    return [{ name: 'python worker', status: 'fail', detail: `importing ${modules.join(', ')} did not finish: ${(err as Error).message.split('\n')[0]}` }];
  }
  const results = stdout
    .trim()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { module: string; file?: string; error?: string; where?: string });
  return results.map((r) =>
    r.error === undefined
      ? { name: 'python worker', status: 'ok', detail: `${python.worker ?? r.module} imports (${r.file ?? r.module})` }
      : {
          name: 'python worker',
          status: 'fail',
          detail: `importing ${r.module} failed: ${r.error}${r.where ? ` (${r.where})` : ''}`,
          fix: r.where ? `fix ${r.where}; the ranks would fail the same way at start` : `fix ${MANIFEST_FILE}'s runtime.python.worker or path`,
        },
  );
}
