/**
 * Issue 37, point 5: half-float frames through `reactor run`. A Python worker computes its frames
 * in float16 and bfloat16 (torch CPU tensors in [0, 1]); where the app declares
 * `pythonWorker(..., { halfPrecision: 'uint8' })` the rank converts them to RGB bytes and a real
 * client gets every byte as `round(x * 255)`. Undeclared, the session fails with the refusal that
 * names the conversion and the declaration, and the server survives it (the next client is told
 * the same, and `reactor run` exits 0 on SIGTERM).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { connect, type ClientFrame } from '@reactor/client';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(repo, 'packages/cli/dist/main.js');
const PY = process.env.REACTOR_PYTHON ?? '/usr/bin/python3';
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** An app whose runner is `pythonWorker()` with `options` (JSON), served as 16x16 raw RGB. */
function workspace(options: object): string {
  const dir = mkdtempSync(join(tmpdir(), 'reactor-pyhalf-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const url = (p: string) => JSON.stringify(pathToFileURL(join(repo, p)).href);
  writeFileSync(
    join(dir, 'app.mjs'),
    [
      `import { Frames, InputState, Output, ReactorApp, reactorApp, Video } from ${url('packages/runtime/dist/index.js')};`,
      `import { DistributedRunner, pythonWorker } from ${url('packages/distributed/dist/index.js')};`,
      'class Out extends Output {}',
      "Video({ width: 16, height: 16 })(Out.prototype, 'mainVideo');",
      'export class HalfApp extends ReactorApp {',
      '  async load() {',
      `    this.runner = new DistributedRunner(pythonWorker(undefined, ${JSON.stringify(options)}), { worldSize: 1, devices: "cpu", logger: this.logger });`,
      '    await this.runner.start();',
      '  }',
      '  async generate() {',
      '    const { frames } = await this.runner.generate({});',
      '    return new Out({ mainVideo: new Frames(frames, [1, 16, 16, 3]) });',
      '  }',
      '  async unload() { await this.runner.shutdown(); }',
      '}',
      "reactorApp({ name: 'py-half', version: '0.0.1', state: InputState, output: Out })(HalfApp);",
      '',
    ].join('\n'),
  );
  writeFileSync(
    join(dir, 'reactor.yaml'),
    [
      'runtime:',
      '  import: app.mjs:HalfApp',
      '  python:',
      `    interpreter: ${PY}`,
      `    path: [${join(repo, 'test/fixtures/python')}]`,
      '    worker: half_worker:HalfWorker',
      'server: { port: 0, encoding: rgb }',
      '',
    ].join('\n'),
  );
  return dir;
}

/** `reactor run --manifest` on `dir`, and the viewer URL it prints. */
async function reactorRun(dir: string) {
  const child = spawn(process.execPath, [cli, 'run', '--manifest', join(dir, 'reactor.yaml')], {
    cwd: dir,
    env: process.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  cleanups.push(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const url = await new Promise<string>((ok, fail) => {
    child.stdout.on('data', () => {
      const m = /Viewer: (\S+)/.exec(out);
      if (m) ok(m[1]!);
    });
    void exited.then((code) => fail(new Error(`reactor run exited ${code}:\n${out}`)));
  });
  return { child, exited, url, output: () => out };
}

/** The error a new client of `url` is told when its session fails. */
async function sessionError(url: string): Promise<string> {
  const client = await connect(url, { WebSocket, reconnect: false });
  try {
    return await new Promise<string>((ok) => {
      const check = () => {
        if (client.session.error) ok(client.session.error.message);
      };
      client.on('session', check);
      check();
    });
  } finally {
    client.close();
  }
}

// Byte i of the worker's frame, converted.
const expected = Uint8Array.from({ length: 16 * 16 * 3 }, (_, i) => i % 256);

describe('half-float frames from a Python worker, through reactor run', () => {
  it("declared halfPrecision: 'uint8': float16 and bfloat16 frames reach the client as the RGB bytes round(x * 255)", async () => {
    const run = await reactorRun(workspace({ halfPrecision: 'uint8' }));
    const client = await connect(run.url, { WebSocket, reconnect: false });
    const frames: ClientFrame[] = [];
    try {
      // Two frames: the worker's float16 frame, then its bfloat16 one.
      await new Promise<void>((ok) =>
        client.on('frame', (f) => {
          frames.push({ ...f, payload: f.payload.slice() });
          if (frames.length === 2) ok();
        }),
      );
      expect(client.session.error).toBeUndefined();
    } finally {
      client.close();
    }
    for (const f of frames) {
      expect(f).toMatchObject({ trackName: 'main_video', width: 16, height: 16 });
      expect(Buffer.from(f.payload).equals(Buffer.from(expected))).toBe(true);
    }
    expect(run.output()).not.toMatch(/python_value|no TypeScript typed array/);
    run.child.kill('SIGTERM');
    expect(await run.exited).toBe(0);
  });

  it('undeclared: the session fails with the refusal naming the conversion and the declaration; the server survives it', async () => {
    const run = await reactorRun(workspace({}));
    const message = await sessionError(run.url);
    expect(message).toContain('frames is a float16 torch tensor, which has no TypeScript typed array');
    expect(message).toContain('frames.float() (float32), or frames as (frames.clamp(0, 1) * 255).to(torch.uint8)');
    expect(message).toContain("or declare pythonWorker(..., { halfPrecision: 'float32' }) (or 'uint8' for frames in [0, 1]) and the rank converts");
    expect(run.output()).toContain('frames is a float16 torch tensor, which has no TypeScript typed array');
    // The runner stays healthy (python_value fails the call, not the ranks): the next client's
    // session reaches the worker again, which is refused the same way.
    expect(await sessionError(run.url)).toContain('frames is a bfloat16 torch tensor, which has no TypeScript typed array');
    run.child.kill('SIGTERM');
    expect(await run.exited).toBe(0);
  });
});
