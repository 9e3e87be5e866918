/**
 * `reactor run` as a user runs it: a child process serving the sample app (2 CPU ranks), a Node
 * client that changes the prompt, pauses, resets, sees a rollout run out, and SIGTERM at the end.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { request as httpRequest } from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { connect, FrameEncoding, type ReactorClient } from '@reactor/client';
import { alive, descendants } from './fixtures/processes.js';
import { sampleWorkspace } from './fixtures/sample-workspace.js';
import { until } from '@reactor/test-kit';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(repo, 'packages/cli/dist/main.js');
const W = 64;
const H = 48;

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function workspace(): string {
  const dir = sampleWorkspace({
    prefix: 'reactor-run-',
    name: 'run-test',
    config: `width: ${W}\nheight: ${H}\nframesPerChunk: 4\nrolloutChunks: 12\nworldSize: 2\ndevices: cpu\nbackend: wasm\n`,
    server: '{ port: 0, encoding: rgb }',
  });
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function startCli(dir: string, ...args: string[]): { child: ChildProcess; url: Promise<string>; stderr: () => string } {
  const child = spawn(process.execPath, [cli, 'run', '--manifest', join(dir, 'reactor.yaml'), ...args], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const url = new Promise<string>((res, rej) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /Viewer: (\S+)/.exec(out);
      if (m) res(m[1]!);
    });
    child.once('exit', (code) => rej(new Error(`reactor run exited with ${code} before printing the viewer URL:\n${err}`)));
  });
  cleanups.push(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return { child, url, stderr: () => err };
}

interface Seen {
  seq: number;
  rgb: Uint8Array;
  at: number;
}

function record(client: ReactorClient): Seen[] {
  const seen: Seen[] = [];
  client.on('frame', (f) => {
    expect(f.encoding).toBe(FrameEncoding.Rgb);
    seen.push({ seq: f.seq, rgb: f.payload.slice(), at: performance.now() });
  });
  return seen;
}

const meanAbsDiff = (a: Uint8Array, b: Uint8Array) => {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += Math.abs(a[i]! - b[i]!);
  return s / a.length;
};

describe('reactor run (the sample app in a child process)', () => {
  it('streams frames that follow the prompt, pauses, resets, recovers a spent rollout, and exits 0 on SIGTERM with no worker left', async () => {
    const dir = workspace();
    const { child, url, stderr } = startCli(dir);
    const base = await url;
    // stderr and stdout are separate pipes: the progress lines may land just after the URL.
    await until(() => /ready in [\d.]+ s/.test(stderr()), 'the "ready" progress line', 5000);
    expect(stderr()).toMatch(/loading the app with config .*config\.yaml/);
    const ranks = descendants(child.pid!);
    expect(ranks.length).toBeGreaterThanOrEqual(2);

    const client = await connect(base, { WebSocket, reconnect: false });
    cleanups.push(() => client.close());
    expect(client.schema.commands.map((c) => c.name).sort()).toEqual(['clear_image', 'reset', 'rewind', 'set_image', 'set_paused', 'set_prompt']);
    const messages: string[] = [];
    client.on('message', (m) => messages.push(m.name));
    let flushedAt = -1;
    client.on('flush', (f) => (flushedAt = f.nextSeq));
    const seen = record(client);

    // The first frame of the rollout, default prompt.
    await until(() => seen.length >= 4, 'the first frames', 20_000);
    expect(seen[0]!.seq).toBe(0);
    expect(seen[0]!.rgb.byteLength).toBe(W * H * 3);
    const forest0 = seen[0]!.rgb;
    expect(meanAbsDiff(seen[1]!.rgb, seen[0]!.rgb)).toBeGreaterThan(0); // it moves
    await until(() => messages.includes('backend_info'), 'the backend_info message', 20_000);

    // A new prompt from frame 0 of a new rollout looks different...
    await client.send('set_prompt', { prompt: 'Neon jellyfish in a midnight ocean.' });
    flushedAt = -1;
    await client.send('reset');
    await until(() => flushedAt >= 0 && seen.some((s) => s.seq >= flushedAt), 'frames after the reset', 20_000);
    const neon0 = seen.find((s) => s.seq >= flushedAt)!.rgb;
    expect(meanAbsDiff(neon0, forest0)).toBeGreaterThan(8);

    // ...and the old prompt from frame 0 gives the very same frame back (deterministic model).
    await client.send('set_prompt', { prompt: 'A walk through a forest.' });
    flushedAt = -1;
    await client.send('reset');
    await until(() => flushedAt >= 0 && seen.some((s) => s.seq >= flushedAt), 'frames after the second reset', 20_000);
    expect(Buffer.from(seen.find((s) => s.seq >= flushedAt)!.rgb).equals(Buffer.from(forest0))).toBe(true);

    // Paused: what was queued plays out, then nothing comes. The server's stats message (every
    // second) says when a whole window played no frame; frames encoded before it have arrived by
    // the next idle window, and a third finds no new frame and no new step.
    await client.send('set_paused', { paused: true });
    const idleWindow = () =>
      new Promise<{ steps: number }>((resolve, reject) => {
        const timer = setTimeout(() => (off(), reject(new Error('no stats window without frames within 15 s of pausing'))), 15_000);
        const off = client.on('stats', (s) => {
          if (s.fps !== 0) return;
          clearTimeout(timer);
          off();
          resolve(s);
        });
      });
    await idleWindow();
    const quietFrom = await idleWindow();
    const during = seen.length;
    const quietTo = await idleWindow();
    expect(seen.length).toBe(during);
    expect(quietTo.steps).toBe(quietFrom.steps);
    await client.send('set_paused', { paused: false });
    await until(() => seen.length > during + 4, 'frames after unpausing', 20_000);

    // 12 chunks per rollout: the app recovers RolloutExhausted by itself and says so.
    await until(() => messages.includes('rollout_restarted'), 'the rollout_restarted message', 30_000);

    // A bad command is refused and changes nothing.
    await expect(client.send('set_prompt', { prompt: 42 })).rejects.toMatchObject({ code: 'invalid_params' });
    expect(client.state['prompt']).toBe('A walk through a forest.');

    client.close();
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    await until(() => ranks.every((p) => !alive(p)), 'every rank process to be gone', 5000);
    expect(stderr()).toMatch(/SIGTERM: closing clients/);
    // An orderly shutdown: the app's unload() stops the runner; no step is torn down mid-flight.
    expect(stderr()).not.toMatch(/runner_unusable|threw; ending the session/);
  }, 90_000);
});

/** A workspace whose app records what the CLI hands it: `load(context)` and `requirements(context)`. */
function contextWorkspace(gpuCount = 3): string {
  const dir = mkdtempSync(join(tmpdir(), 'reactor-contract-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(
    join(dir, 'app.mjs'),
    [
      `import { InputState, Output, ReactorApp, reactorApp, Video } from ${JSON.stringify(pathToFileURL(join(repo, 'packages/runtime/dist/index.js')).href)};`,
      'class Out extends Output {}',
      "Video({ width: 16, height: 16 })(Out.prototype, 'mainVideo');",
      'export class ContextApp extends ReactorApp {',
      '  static requirements(c) {',
      "    return { worldSize: 3, usesGpu: true, checks: [{ name: 'fixture', status: 'ok', detail: `requirements ${JSON.stringify(c)}` }] };",
      '  }',
      '  load(c) {',
      '    c.logger.info(`load ${JSON.stringify({ configPath: c.configPath, manifestGpuCount: c.manifestGpuCount })}`);',
      '  }',
      '  generate() { return null; }',
      '}',
      "reactorApp({ name: 'context-app', version: '1.2.3', state: InputState, output: Out })(ContextApp);",
      '',
    ].join('\n'),
  );
  writeFileSync(join(dir, 'app.yaml'), 'anything: 1\n');
  writeFileSync(
    join(dir, 'reactor.yaml'),
    `model: { name: contract, version: 0.0.1, resources: { gpu: { count: ${gpuCount} } } }\nruntime: { import: app.mjs:ContextApp, config: app.yaml }\nserver: { port: 0 }\n`,
  );
  return dir;
}

function doctor(dir: string, env: Record<string, string | undefined>) {
  const clean = { ...process.env };
  delete clean['REACTOR_GPU_COUNT'];
  delete clean['CUDA_VISIBLE_DEVICES'];
  for (const [k, v] of Object.entries(env)) if (v !== undefined) clean[k] = v;
  return spawnSync(process.execPath, [cli, 'doctor', '--manifest', join(dir, 'reactor.yaml')], { encoding: 'utf8', timeout: 30_000, env: clean });
}

describe('reactor run and doctor: the typed host/app contract', () => {
  it("hands load() the config path, the manifest's GPU count and a logger that writes to the CLI's stderr", async () => {
    const dir = contextWorkspace();
    const { child, url, stderr } = startCli(dir);
    await url;
    expect(stderr()).toContain(`[reactor] load {"configPath":${JSON.stringify(join(dir, 'app.yaml'))},"manifestGpuCount":3}`);
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  });

  it("doctor counts GPUs as the runner does (REACTOR_GPU_COUNT) and hands that count to the app's requirements()", () => {
    const dir = contextWorkspace();
    const r = doctor(dir, { REACTOR_GPU_COUNT: '2' });
    expect(r.stdout).toContain('ok    gpus: 2 GPU(s) visible, 3 declared in reactor.yaml');
    expect(r.stdout).toContain(`ok    fixture: requirements {"configPath":${JSON.stringify(join(dir, 'app.yaml'))},"manifestGpuCount":3,"gpuCount":2}`);
    expect(r.stdout).toContain('FAIL  world size: the app starts 3 ranks but 2 GPU(s) are visible');
    expect(r.status).toBe(1);
  });

  it('doctor honours CUDA_VISIBLE_DEVICES="" (no GPU) like the runner', () => {
    const r = doctor(contextWorkspace(), { CUDA_VISIBLE_DEVICES: '' });
    expect(r.stdout).toContain('warn  gpus: no GPU visible (reactor.yaml declares 3); ranks will run on CPU');
    expect(r.stdout).toContain('"gpuCount":0');
    expect(r.stdout).toContain('ok    world size: 3 rank(s) on GPUs');
  });
});

/** GET `path` on the server at `base` (loopback) with the given headers: status and error code. */
function get(base: string, path: string, headers: Record<string, string>): Promise<{ status: number; code: string | undefined }> {
  const u = new URL(base);
  return new Promise((res, rej) => {
    const req = httpRequest({ host: '127.0.0.1', port: Number(u.port), path, headers }, (r) => {
      let body = '';
      r.on('data', (d: Buffer) => (body += d.toString()));
      r.on('end', () => {
        let code: string | undefined;
        try {
          code = (JSON.parse(body) as { error?: { code?: string } }).error?.code;
        } catch {
          code = undefined;
        }
        res({ status: r.statusCode ?? 0, code });
      });
    });
    req.on('error', rej);
    req.end();
  });
}

async function stop(child: ChildProcess): Promise<void> {
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  child.kill('SIGTERM');
  expect(await exited).toBe(0);
}

describe('reactor run: safe exposure', () => {
  it('refuses a non-loopback --host without a token, says why and what to do, and listens on nothing', () => {
    const dir = contextWorkspace();
    const env = { ...process.env };
    delete env['REACTOR_TOKEN'];
    const r = spawnSync(process.execPath, [cli, 'run', '--manifest', join(dir, 'reactor.yaml'), '--host', '0.0.0.0', '--port', '0'], {
      encoding: 'utf8',
      timeout: 30_000,
      env,
    });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(
      'reactor: refusing to serve on 0.0.0.0 without an access token: anyone who can reach this machine could watch and control the stream. ' +
        `Set a token (--token <secret>, REACTOR_TOKEN, or server.token in ${join(dir, 'reactor.yaml')}), bind a loopback address (--host 127.0.0.1), ` +
        'or pass --insecure if every machine on this network is trusted [insecure_bind]',
    );
    expect(r.stdout).not.toContain('Viewer:');
  });

  it('serves with --insecure (warning) and answers only the --allowed-host names and --allowed-origin pages given, repeated or comma-separated', async () => {
    const dir = contextWorkspace();
    const args = [
      '--host',
      '0.0.0.0',
      '--insecure',
      '--allowed-host',
      'proxy.example,other.example',
      '--allowed-host',
      'third.example',
      '--allowed-origin',
      'https://app.example',
    ];
    const { child, url, stderr } = startCli(dir, ...args);
    const base = await url;
    expect(stderr()).toContain('--insecure: serving on 0.0.0.0 without a token');
    expect(await get(base, '/schema', { Host: 'third.example' })).toMatchObject({ status: 200 });
    expect(await get(base, '/schema', { Host: 'proxy.example', Origin: 'https://app.example' })).toMatchObject({ status: 200 });
    expect(await get(base, '/schema', { Host: 'evil.example' })).toEqual({ status: 403, code: 'host_not_allowed' });
    expect(await get(base, '/schema', { Host: 'proxy.example', Origin: 'https://evil.example' })).toEqual({ status: 403, code: 'origin_not_allowed' });
    await stop(child);
  });

  it("takes allowed_hosts from reactor.yaml's server section (a reverse proxy's name on a loopback server)", async () => {
    const dir = contextWorkspace();
    writeFileSync(
      join(dir, 'reactor.yaml'),
      `${readFileSync(join(dir, 'reactor.yaml'), 'utf8').replace('server: { port: 0 }', 'server: { port: 0, allowed_hosts: [proxy.example] }')}`,
    );
    const { child, url } = startCli(dir);
    const base = await url;
    expect(await get(base, '/schema', { Host: 'proxy.example' })).toMatchObject({ status: 200 });
    expect(await get(base, '/schema', { Host: 'evil.example' })).toEqual({ status: 403, code: 'host_not_allowed' });
    await stop(child);
  });

  it('names a malformed --allowed-host / --allowed-origin and exits 1', () => {
    const dir = contextWorkspace();
    const r = spawnSync(
      process.execPath,
      [cli, 'run', '--manifest', join(dir, 'reactor.yaml'), '--allowed-host', 'ok.example,https://x.example', '--allowed-origin', 'app.example'],
      { encoding: 'utf8', timeout: 30_000 },
    );
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('--allowed-host: "https://x.example" is not a host name: give the name alone, without scheme or port');
    expect(r.stderr).toContain('[cli_usage]');
  });
});

function cliRun(dir: string, ...args: string[]) {
  return spawnSync(process.execPath, [cli, ...args, '--manifest', join(dir, 'reactor.yaml')], { encoding: 'utf8', timeout: 30_000 });
}

describe('reactor run: manifests without traps', () => {
  it('runs a manifest without model: and names the app after its @reactorApp name and version', async () => {
    const dir = contextWorkspace();
    writeFileSync(join(dir, 'reactor.yaml'), 'runtime: { import: app.mjs:ContextApp }\nserver: { port: 0 }\n');
    const { child, url, stderr } = startCli(dir);
    await url;
    expect(stderr()).toContain(`[reactor] context-app 1.2.3 (${join(dir, 'reactor.yaml')})`);
    expect(stderr()).toContain('"manifestGpuCount":0');
    await stop(child);
  });

  // One reactor process per test: each spawn loads the whole CLI (seconds on a busy machine), so
  // the three paths are three tests, each with its own time budget.
  it('names the key and the folder a wrong path was resolved from: runtime.import', () => {
    const dir = contextWorkspace();
    const manifest = join(dir, 'reactor.yaml');
    writeFileSync(manifest, 'runtime: { import: nowhere/app.js:ContextApp }\n');
    const r = cliRun(dir, 'run');
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(
      `reactor: runtime.import points at ${join(dir, 'nowhere/app.js')}, which does not exist (resolved from ${dir}, the folder of ${manifest}); fix the path in runtime.import [app_import_failed]`,
    );
  });

  it('names the key and the folder a wrong path was resolved from: runtime.config', () => {
    const dir = contextWorkspace();
    const manifest = join(dir, 'reactor.yaml');
    writeFileSync(manifest, 'runtime: { import: app.mjs:ContextApp, config: conf/missing.yaml }\n');
    const r = cliRun(dir, 'run');
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(
      `reactor: runtime.config: ${join(dir, 'conf/missing.yaml')} does not exist (resolved from ${dir}, the folder of ${manifest}); fix the path or pass --config <file> [manifest_invalid]`,
    );
  });

  it('names the key and the folder a wrong path was resolved from: runtime.weights_path (reactor doctor)', () => {
    const dir = contextWorkspace();
    const manifest = join(dir, 'reactor.yaml');
    writeFileSync(manifest, 'runtime: { import: app.mjs:ContextApp, weights_path: w }\n');
    const r = cliRun(dir, 'doctor');
    expect(r.stderr).toContain(
      `reactor: runtime.weights_path: ${join(dir, 'w')} does not exist (resolved from ${dir}, the folder of ${manifest}); fix the path or set REACTOR_WEIGHTS_PATH [manifest_invalid]`,
    );
  });
});

describe('reactor: stale builds', () => {
  /** The context app as a package's dist/ module, with a source file edited after the build. */
  function staleWorkspace(): { dir: string; module: string; source: string } {
    const dir = contextWorkspace();
    mkdirSync(join(dir, 'pkg/dist'), { recursive: true });
    mkdirSync(join(dir, 'pkg/src/model'), { recursive: true });
    const module = join(dir, 'pkg/dist/app.mjs');
    const source = join(dir, 'pkg/src/model/app.ts');
    writeFileSync(module, readFileSync(join(dir, 'app.mjs')));
    writeFileSync(join(dir, 'pkg/src/index.ts'), '');
    writeFileSync(source, '// edited after the build\n');
    const built = new Date(Date.now() - 60_000);
    utimesSync(module, built, built);
    utimesSync(join(dir, 'pkg/src/index.ts'), built, built);
    writeFileSync(join(dir, 'reactor.yaml'), 'runtime: { import: pkg/dist/app.mjs:ContextApp }\nserver: { port: 0 }\n');
    return { dir, module, source };
  }

  it('reactor run refuses a dist/ module older than its sources, naming both and pnpm build', () => {
    const { dir, module, source } = staleWorkspace();
    const r = cliRun(dir, 'run');
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(
      `reactor: ${module} is older than ${source} (edited after the last build): the app would run stale code. Run pnpm build (pnpm start builds first) [stale_build]`,
    );
    expect(r.stdout).not.toContain('Viewer:');
  });

  it('reactor schema warns loudly and goes on; an up-to-date build gives no warning', () => {
    const { dir, module, source } = staleWorkspace();
    let r = cliRun(dir, 'schema');
    expect(r.status).toBe(0);
    expect(r.stderr).toContain(`WARNING: ${module} is older than ${source}`);
    expect(JSON.parse(r.stdout)).toMatchObject({ app: { name: 'context-app', version: '1.2.3' } });
    utimesSync(module, new Date(), new Date());
    r = cliRun(dir, 'schema');
    expect(r.status).toBe(0);
    expect(r.stderr).not.toContain('WARNING');
  });
});

describe('pnpm reactor run: signals to the outer pnpm process', () => {
  it.each(['SIGINT', 'SIGTERM', 'SIGHUP'] as const)(
    '%s to pnpm (no terminal) shuts the server down in order and leaves no process behind',
    async (signal) => {
      const dir = workspace();
      const child = spawn('pnpm', ['reactor', 'run', '--manifest', join(dir, 'reactor.yaml')], { cwd: repo, stdio: ['ignore', 'pipe', 'pipe'] });
      cleanups.push(() => {
        // Only while pnpm still runs: once it has exited, its pid may belong to another process.
        if (child.exitCode !== null || child.signalCode !== null) return;
        for (const p of descendants(child.pid!)) process.kill(p, 'SIGKILL');
        child.kill('SIGKILL');
      });
      let out = '';
      let err = '';
      child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
      const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
      await until(() => out.includes('Viewer:') || child.exitCode !== null, 'the viewer URL', 60_000);
      expect(out).toContain('Viewer:');
      const tree = descendants(child.pid!);
      // pnpm's shell, the CLI's node and its two ranks (pnpm may add a watchdog shell)
      expect(tree.length).toBeGreaterThanOrEqual(4);
      child.kill(signal);
      await exited;
      await until(() => tree.every((p) => !alive(p)), 'every process of the tree to be gone', 15_000);
      expect(err).toContain(`${signal}: closing clients and shutting the app down`);
    },
    90_000,
  );
});

describe('reactor --help', () => {
  it.each(['--help', '-h', 'run --help', ''])('prints the help once for "reactor %s", and starts nothing', (line) => {
    const r = spawnSync(process.execPath, [cli, ...line.split(' ').filter(Boolean)], { encoding: 'utf8', timeout: 30_000, cwd: tmpdir() });
    expect(r.status).toBe(0);
    expect(r.stdout.match(/^Usage:$/gm)).toHaveLength(1);
    expect(r.stdout.match(/^reactor\/0\.1\.0$/gm)).toHaveLength(1);
    expect(r.stderr).toBe('');
  });
});

describe('reactor run: bad input', () => {
  it('says what to do when the port is taken, and exits 1', async () => {
    const blocker = createServer();
    await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise((r) => blocker.close(r)));
    const { port } = blocker.address() as AddressInfo;
    const dir = workspace();
    const r = spawnSync(process.execPath, [cli, 'run', '--manifest', join(dir, 'reactor.yaml'), '--port', String(port)], { encoding: 'utf8', timeout: 30_000 });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(
      `reactor: cannot listen on 127.0.0.1:${port} (EADDRINUSE): something else listens there; pass --port <other> (0 picks a free one)`,
    );
    expect(r.stderr).toContain('[port_unavailable]');
  });

  it('names every bad key of reactor.yaml and exits 1', () => {
    const dir = mkdtempSync(join(tmpdir(), 'reactor-bad-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, 'reactor.yaml'), "model: { name: x, version: '' }\nruntime: { import: nowhere }\n");
    const r = spawnSync(process.execPath, [cli, 'run', '--manifest', join(dir, 'reactor.yaml')], { encoding: 'utf8', timeout: 30_000 });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('model.version: must be longer than or equal to 1 characters');
    expect(r.stderr).toContain('runtime.import: must look like "path/to/module.js:ExportName"');
    expect(r.stderr).toContain('[manifest_invalid]');
  });
});
