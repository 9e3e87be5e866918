// `backend: torch` through the documented door: `reactor run --manifest` serving the enhance app
// in a child process with Python ranks (Debian's /usr/bin/python3, torch on CPU), a Node client
// outside it. Frames of the planned size arrive and are the PyTorch module's upscaling of the
// scene (within one level of `python3 -m reactor_enhance` on the same input, band by band
// through the gather), every rank reports torch; a SIGKILLed Python rank is told to the client
// and leaves no process behind; `compile: both` falls back to eager on CPU with a warning naming
// why; a bad backend, compile mode or interpreter is a clear error at start.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { until } from '@reactor/test-kit';
import { WebSocket } from 'ws';
import { connect, FrameEncoding } from '@reactor/client';
import { descendants } from '@reactor/distributed/internal';
import { sceneFrames } from '../src/source.js';
import { modelPackageDir } from '../src/weights.js';

const PYTHON = process.env['REACTOR_TEST_PYTHON'] ?? '/usr/bin/python3';
const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../../..');
const cli = join(repo, 'packages/cli/dist/main.js');

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function workspace(config: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'enhance-torch-serve-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'config.yaml'), config);
  writeFileSync(
    join(dir, 'reactor.yaml'),
    `model: { name: enhance-torch-test, version: 0.0.1 }\nruntime:\n  import: ${join(repo, 'apps/enhance/dist/index.js')}:EnhanceApp\n  config: config.yaml\nserver: { port: 0, encoding: rgb }\n`,
  );
  return dir;
}

function startCli(dir: string): { child: ChildProcess; url: Promise<string>; exited: Promise<number | null>; output: () => string } {
  const child = spawn(process.execPath, [cli, 'run', '--manifest', join(dir, 'reactor.yaml')], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  let text = '';
  child.stderr!.on('data', (d: Buffer) => (text += d.toString()));
  child.stdout!.on('data', (d: Buffer) => (text += d.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const url = new Promise<string>((res, rej) => {
    child.stdout!.on('data', () => {
      const m = /Viewer: (\S+)/.exec(text);
      if (m) res(m[1]!);
    });
    void exited.then((code) => rej(new Error(`reactor run exited with ${code} before printing the viewer URL:\n${text}`)));
  });
  url.catch(() => {});
  cleanups.push(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return { child, url, exited, output: () => text };
}

const pythonRanks = (pid: number): number[] =>
  descendants(pid).filter((p) => {
    try {
      return readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('reactor_worker');
    } catch {
      return false;
    }
  });
/** Whether the ranks' interpreter has torch.compile (torch 2): then compile: both on CPU falls back to torch.compile alone. */
const torchCompiles = (): boolean => spawnSync(PYTHON, ['-c', 'import torch, sys; sys.exit(0 if hasattr(torch, "compile") else 1)']).status === 0;
const shm = (): string[] => readdirSync('/dev/shm').filter((f) => f.startsWith('reactor-'));

/** `python3 -m reactor_enhance` on `frames` (the module alone, one process, whole frames). */
function moduleUpscale(frames: Uint8Array, n: number, w: number, h: number): Uint8Array {
  const args = [
    '-m',
    'reactor_enhance',
    '--model',
    'slim',
    '--package-dir',
    modelPackageDir('slim'),
    '--n',
    String(n),
    '--width',
    String(w),
    '--height',
    String(h),
  ];
  const r = spawnSync(PYTHON, args, { cwd: join(repo, 'apps/enhance/python'), input: frames, maxBuffer: 16 << 20, timeout: 60_000 });
  expect(r.status, r.stderr.toString()).toBe(0);
  return new Uint8Array(r.stdout);
}

describe('reactor run --manifest with backend: torch (Python ranks, CPU)', () => {
  it('streams the PyTorch upscaling of the scene through 2 Python ranks (tiles); compile: both falls back to eager, said; a SIGKILLed rank is told to the client and leaves nothing', async () => {
    const dir = workspace(
      `model: slim\noutputWidth: 64\noutputHeight: 40\nframesPerStep: 2\nworldSize: 2\ndevices: cpu\nsplit: tiles\nbackend: torch\npython: ${PYTHON}\ncompile: both\n`,
    );
    // The module's upscaling of the first step's scene frames (0 and 1), computed before the
    // client connects (a blocking child here would make the client miss heartbeats).
    const want = moduleUpscale(sceneFrames(0, 2, 16, 10), 2, 16, 10);
    const before = new Set(shm());
    const { child, url, output } = startCli(dir);
    const client = await connect(await url, { WebSocket, reconnect: false });
    cleanups.push(() => client.close());
    const ranks = pythonRanks(child.pid!);
    expect(ranks).toHaveLength(2);
    expect(output()).toMatch(/weights ESRGAN slim x4 \(float32, 0\.9 MiB.*\) from .*esrgan-slim\/models\/x4: sha256 [0-9a-f]{64}; torch .* on CPU/);

    const frames: { w: number; h: number; rgb: Uint8Array; seq: number }[] = [];
    client.on('frame', (f) => {
      expect(f.encoding).toBe(FrameEncoding.Rgb);
      frames.push({ w: f.width, h: f.height, rgb: f.payload.slice(), seq: f.seq });
    });
    const infos: Record<string, unknown>[] = [];
    const told: { what: string; at: number; detail: unknown }[] = [];
    client.on('message', (m) => {
      if (m.name === 'enhance_info') infos.push(m.data as Record<string, unknown>);
      if (m.name === 'runner_restarting') told.push({ what: 'runner_restarting', at: performance.now(), detail: m.data });
    });
    client.on('session', (s) => {
      if (s.error) told.push({ what: 'session_error', at: performance.now(), detail: s.error });
    });
    await until(() => frames.length >= 4 && infos.length > 0, 'the first frames and enhance_info', 60_000);
    expect(frames.slice(0, 4).map((f) => [f.w, f.h, f.rgb.length])).toEqual(Array(4).fill([64, 40, 64 * 40 * 3]));
    expect(infos[0]).toMatchObject({ model: 'slim', scale: 4, input_width: 16, input_height: 10, output_width: 64, output_height: 40, split: 'tiles' });
    expect((infos[0]!['ranks'] as { backend: string }[]).map((r) => r.backend)).toEqual(['torch-cpu', 'torch-cpu']);
    // compile: both on CPU ranks (CUDA graphs need CUDA; Debian's torch 1.13 has no torch.compile):
    // eager, with one warning from the leader naming why, and what runs in every rank's report.
    const why = torchCompiles() ? 'CUDA graphs need a CUDA device and this rank runs on cpu' : 'has no torch.compile';
    expect(output().match(/warning: ESRGAN slim: compile both -> [^\n]*/g)).toEqual([expect.stringContaining(why)]);
    for (const r of infos[0]!['ranks'] as { compile: string }[]) expect(r.compile).toMatch(new RegExp(`^(eager|torch\\.compile) \\(compile: both; .*${why}`));

    // The first step upscaled scene frames 0 and 1: the gathered bands are the module's whole frames.
    const first = frames.filter((f) => f.seq < 2).sort((a, b) => a.seq - b.seq);
    expect(first).toHaveLength(2);
    const got = new Uint8Array(want.length);
    got.set(first[0]!.rgb, 0);
    got.set(first[1]!.rgb, first[0]!.rgb.length);
    let off = 0;
    for (let i = 0; i < want.length; i++) if (Math.abs(got[i]! - want[i]!) > 1) off++;
    expect(off / want.length).toBeLessThanOrEqual(0.001);

    // SIGKILL a Python rank while steps run: the client is told, the runner's processes and
    // shared memory go, and a new runner streams again.
    const ours = shm().filter((s) => !before.has(s) && s.startsWith(`reactor-${child.pid}.`));
    expect(ours.length).toBeGreaterThan(0);
    const t0 = performance.now();
    process.kill(ranks[1]!, 'SIGKILL');
    await until(() => told.length > 0, 'the client to be told', 10_000).catch((e: Error) => {
      throw new Error(`${e.message}; frames ${frames.length}; server output:\n${output().slice(-3000)}`);
    });
    // Told by the rank's exit, not by the stall watch (which would name no signal): the message says how the rank died.
    expect(JSON.stringify(told[0]!.detail)).toMatch(/SIGKILL/);
    console.info(`told ${(told[0]!.at - t0).toFixed(0)} ms after the SIGKILL`);
    // The rebuilt runner comes up while the old one's teardown (its ranks reaped, its segments
    // unlinked) may still be finishing on a busy machine: once it is up, nothing of the old
    // runner may be left after that teardown's own bound.
    await until(() => /the new runner is up/.test(output()), 'the rebuilt runner', 60_000);
    await until(() => pythonRanks(child.pid!).every((p) => !ranks.includes(p)), 'the old ranks to be gone', 30_000);
    await until(() => ours.every((s) => !shm().includes(s)), "the old runner's shared memory to be gone", 30_000);
    // The session ended with the error; a new client gets a new session on the rebuilt runner.
    client.close();
    const again = await connect(await url, { WebSocket, reconnect: false });
    cleanups.push(() => again.close());
    let more = 0;
    again.on('frame', () => more++);
    await until(() => more > 2, 'frames from the rebuilt runner', 60_000);
    expect(pythonRanks(child.pid!)).toHaveLength(2);

    again.close();
    child.kill('SIGTERM');
    expect(await new Promise((r) => child.once('exit', r))).toBe(0);
    expect(pythonRanks(process.pid)).toEqual([]);
    // This server's segments (named from its pid): another test file's server may be running beside this one.
    expect(shm().filter((s) => !before.has(s) && s.startsWith(`reactor-${child.pid}.`))).toEqual([]);
  }, 120_000);

  it('backend "torch,wasm" is enhance_backend_config at start, naming the fix', async () => {
    const dir = workspace(`model: slim\ndevices: cpu\nbackend: torch,wasm\npython: ${PYTHON}\n`);
    const { exited, output } = startCli(dir);
    expect(await exited).not.toBe(0);
    expect(output()).toContain('"torch" runs the model in Python ranks and cannot be part of a tfjs order');
    expect(output()).toContain('BackendConfigError');
  }, 60_000);

  it('compile: fast is the config error at start, naming the key and its values', async () => {
    const dir = workspace(`model: slim\ndevices: cpu\nbackend: torch\npython: ${PYTHON}\ncompile: fast\n`);
    const { exited, output } = startCli(dir);
    expect(await exited).not.toBe(0);
    expect(output()).toContain('config.yaml is invalid');
    expect(output()).toContain('compile: compile must be one of the following values: auto, off, compile, graphs, both');
  }, 60_000);

  it('an interpreter that does not exist is python_not_found at start, and nothing is left running', async () => {
    const dir = workspace('model: slim\ndevices: cpu\nbackend: torch\npython: /nonexistent/python3\n');
    const { child, exited, output } = startCli(dir);
    const pid = child.pid!;
    expect(await exited).not.toBe(0);
    expect(output()).toContain('PythonWorkerError: The Python interpreter "/nonexistent/python3" (pythonWorker(..., { interpreter })) was not found');
    expect(output()).toContain('set REACTOR_PYTHON=/path/to/python3');
    expect(pythonRanks(pid)).toEqual([]);
  }, 60_000);
});
