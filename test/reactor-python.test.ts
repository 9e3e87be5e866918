/**
 * `runtime.python` in reactor.yaml, through `reactor run` as a user types it: the interpreter,
 * the import path and the worker the manifest names reach a `pythonWorker()` that names nothing
 * itself (no REACTOR_PYTHON in the environment: the manifest's interpreter is the one used).
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

function workspace(): string {
  const dir = mkdtempSync(join(tmpdir(), 'reactor-python-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const url = (p: string) => JSON.stringify(pathToFileURL(join(repo, p)).href);
  writeFileSync(
    join(dir, 'app.mjs'),
    [
      `import { Frames, InputState, Output, ReactorApp, reactorApp, Video } from ${url('packages/runtime/dist/index.js')};`,
      `import { DistributedRunner, pythonWorker } from ${url('packages/distributed/dist/index.js')};`,
      'class Out extends Output {}',
      "Video({ width: 16, height: 16 })(Out.prototype, 'mainVideo');",
      'export class PyApp extends ReactorApp {',
      '  async load() {',
      '    this.runner = new DistributedRunner(pythonWorker(), { worldSize: 1, devices: "cpu", logger: this.logger });',
      '    await this.runner.start();',
      '  }',
      '  async generate() {',
      '    const { frames } = await this.runner.generate({ payloadBytes: 16 * 16 * 3 });',
      '    return new Out({ mainVideo: new Frames(frames, [1, 16, 16, 3]) });',
      '  }',
      '  async unload() { await this.runner.shutdown(); }',
      '}',
      "reactorApp({ name: 'py-app', version: '0.0.1', state: InputState, output: Out })(PyApp);",
      '',
    ].join('\n'),
  );
  writeFileSync(
    join(dir, 'reactor.yaml'),
    [
      'runtime:',
      '  import: app.mjs:PyApp',
      '  python:',
      `    interpreter: ${PY}`,
      `    path: [${join(repo, 'packages/distributed/test/fixtures/python')}]`,
      '    worker: bench_worker:BenchWorker',
      'server: { port: 0 }',
      '',
    ].join('\n'),
  );
  return dir;
}

describe('reactor.yaml runtime.python', () => {
  it('names the interpreter, the import path and the worker of pythonWorker()', async () => {
    const dir = workspace();
    const env = { ...process.env };
    delete env.REACTOR_PYTHON;
    delete env.REACTOR_PYTHON_PATH;
    delete env.REACTOR_PYTHON_WORKER;
    const child = spawn(process.execPath, [cli, 'run', '--manifest', join(dir, 'reactor.yaml')], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] });
    cleanups.push(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    });
    let err = '';
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const url = await new Promise<string>((res, rej) => {
      let out = '';
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /Viewer: (\S+)/.exec(out);
        if (m) res(m[1]!);
      });
      child.once('exit', (code) => rej(new Error(`reactor run exited ${code}:\n${err}`)));
    });
    const client = await connect(url, { WebSocket, reconnect: false });
    try {
      const frame = await new Promise<ClientFrame>((r) => client.once('frame', r));
      expect(frame).toMatchObject({ trackName: 'main_video', width: 16, height: 16 });
    } finally {
      client.close();
    }
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  });

  it('refuses an unknown key and a malformed worker, naming them', async () => {
    const dir = workspace();
    writeFileSync(join(dir, 'reactor.yaml'), 'runtime:\n  import: app.mjs:PyApp\n  python:\n    worker: bench_worker.BenchWorker\n    interpeter: python3\n');
    const child = spawn(process.execPath, [cli, 'schema', '--manifest', join(dir, 'reactor.yaml')], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
    expect(code).not.toBe(0);
    expect(err).toContain('runtime.python.worker: must look like "video_worker:VideoWorker" (module:Class)');
    expect(err).toContain('runtime.python.interpeter: unknown key (allowed: interpreter, path, worker, torch)');
  });
});
