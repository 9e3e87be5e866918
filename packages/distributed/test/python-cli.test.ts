// Issue 37, point 5: `python -m reactor_worker run module:Class --input in.json [--world-size 2]`
// runs a worker without Node, for debugging (rank 0 in the foreground, pdb included), printing
// the result's shapes; a rank's exception exits non-zero with its traceback.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { FIXTURES, PY } from './python-helpers.js';

const PACKAGE = fileURLToPath(new URL('../python/', import.meta.url));

function python(args: string[], stdin?: string, env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((done) => {
    const child = spawn(PY, args, { cwd: FIXTURES, env: { ...process.env, PYTHONPATH: PACKAGE, ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.stdin.end(stdin ?? '');
    const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      done({ code, out, err });
    });
  });
}

describe('python -m reactor_worker run', () => {
  it('runs load() and generate() on two ranks (torch.distributed, gloo) and prints the result fields with dtype and shape', async () => {
    const r = await python(['-m', 'reactor_worker', 'run', 'collective_worker:CollectiveWorker', '--input', '{"reduce": true}', '--world-size', '2']);
    expect(r.code, r.err).toBe(0);
    expect(r.out).toBe("rank 0 of 2: generate() returned\n  result.backend: str 'gloo'\n  result.gathered: tensor float32 (4,) on cpu\n");
  });

  it('a raise on rank 1 exits 1 with its traceback (file, line, source), even while rank 0 waits in all_gather, and leaves no temp folder', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'reactor-cli-tmp-'));
    const r = await python(
      ['-m', 'reactor_worker', 'run', 'collective_worker:CollectiveWorker', '--input', '{"raiseOn": [1], "where": "before"}', '--world-size', '2'],
      undefined,
      { TMPDIR: tmp },
    );
    // Rank 0 ends the run from its peer watcher (os._exit): the folder where peers report failure went with it.
    const left = readdirSync(tmp);
    rmSync(tmp, { recursive: true, force: true });
    expect(left).toEqual([]);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(
      /rank 1 failed:\nTraceback \(most recent call last\):[\s\S]*collective_worker\.py", line \d+, in generate\n\s+raise ValueError\(f"rank \{self\.rank\} refuses the input before all_gather"\)[\s\S]*ValueError: rank 1 refuses the input before all_gather/,
    );
    expect(r.out).not.toContain('generate() returned');
  });

  it('runs under pdb: rank 0 is the foreground process', async () => {
    const r = await python(['-m', 'pdb', '-m', 'reactor_worker', 'run', 'echo_worker:EchoWorker', '--input', '{"value": 3}'], 'continue\n');
    expect(r.out).toContain('(Pdb)');
    expect(r.out).toMatch(/rank 0 of 1: generate\(\) returned\n {2}result\.rank: int 0\n/);
  });

  it('names a worker that does not exist, and ships py.typed for editors and type checkers', async () => {
    const r = await python(['-m', 'reactor_worker', 'run', 'echo_worker:EchoWorkr', '--input', '{}']);
    expect(r.code).not.toBe(0);
    expect(r.err).toMatch(/reactor_worker: echo_worker \(\S+echo_worker\.py\) has no DistributedWorker named EchoWorkr; it defines EchoWorker/);
    expect(existsSync(`${PACKAGE}reactor_worker/py.typed`)).toBe(true);
  });

  // The documented install (docs/runner.md, "The Python package"), in a virtual environment of
  // REACTOR_PYTHON (with its site packages: NumPy, torch, and the setuptools and wheel the build uses).
  const hasPip = spawnSync(PY, ['-m', 'pip', '--version']).status === 0 && spawnSync(PY, ['-c', 'import venv, setuptools, wheel']).status === 0;
  it.skipIf(!hasPip)(
    "pip install --no-build-isolation -e packages/distributed/python: the environment imports the checkout's reactor_worker (py.typed with it) and runs a worker without PYTHONPATH",
    () => {
      const dir = mkdtempSync(join(tmpdir(), 'reactor-pip-e-'));
      try {
        const venv = join(dir, 'venv');
        expect(spawnSync(PY, ['-m', 'venv', '--system-site-packages', venv], { encoding: 'utf8' }).status).toBe(0);
        const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'PYTHONPATH'));
        const pip = spawnSync(join(venv, 'bin/pip'), ['install', '--no-build-isolation', '--no-index', '-e', PACKAGE], { encoding: 'utf8', env });
        expect(pip.status, `${pip.stdout}${pip.stderr}`).toBe(0);
        const probe = spawnSync(
          join(venv, 'bin/python'),
          [
            '-c',
            "import reactor_worker, importlib.resources as r; print(reactor_worker.__file__); print(r.files('reactor_worker').joinpath('py.typed').is_file())",
          ],
          { cwd: dir, encoding: 'utf8', env },
        );
        expect(probe.stdout).toBe(`${PACKAGE}reactor_worker/__init__.py\nTrue\n`);
        const run = spawnSync(join(venv, 'bin/python'), ['-m', 'reactor_worker', 'run', 'echo_worker:EchoWorker', '--input', '{"value": 3}'], {
          cwd: FIXTURES,
          encoding: 'utf8',
          env,
        });
        expect(run.status, run.stderr).toBe(0);
        expect(run.stdout).toMatch(/rank 0 of 1: generate\(\) returned\n {2}result\.rank: int 0\n/);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
    120_000,
  );
});
