// `reactor dev` reloads the app half under open WebSocket connections: a raw client (the
// project's own `ws`, no reconnect logic) stays connected across an atomic save of src/app.ts,
// gets a new welcome on the same socket with the session's state carried, then frames painted by
// the new version; when the state class changes it gets the new defaults and a `state_reset`
// notice, still on the same socket. A change to the manifest's server: keys restarts the server
// (the one case the socket closes), and a client that reconnects finds the state carried; a
// tracks change restarts it too, and a client coming back is told what was lost (state_reset).
import { execFile, spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { alive, descendants } from '@reactor/distributed/internal';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { until } from '@reactor/test-kit';

const bin = resolve(dirname(fileURLToPath(import.meta.url)), '../dist/main.js');
const scratch = mkdtempSync(join(tmpdir(), 'reactor-dev-swap-test-'));
chmodSync(scratch, 0o755);
const project = join(scratch, 'swap-app');
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

// The nested pnpm works on a project of its own: none of this workspace's settings.
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(npm_|PNPM_|VITEST|NODE_OPTIONS$)/i.test(k) && k !== 'TEST' && k !== 'NODE_ENV'));

function run(cmd: string, args: string[], cwd: string): Promise<{ code: number; out: string }> {
  return new Promise((done) => {
    execFile(cmd, args, { cwd, env }, (err, stdout, stderr) =>
      done({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, out: `${stdout}${stderr}` }),
    );
  });
}

/** Saves as vim and JetBrains' safe write do: a temporary file renamed over the file. */
function atomicWrite(file: string, text: string): void {
  const tmp = join(dirname(file), `.${Date.now()}.tmp`);
  writeFileSync(tmp, text);
  renameSync(tmp, file);
}

beforeAll(async () => {
  const init = await run(process.execPath, [bin, 'init', project], scratch);
  expect(init.code, init.out).toBe(0);
  let install = await run('pnpm', ['install', '--offline'], project);
  if (install.code !== 0) install = await run('pnpm', ['install'], project);
  expect(install.code, install.out).toBe(0);
  // Raw RGB frames, so the test reads the pixels the app painted.
  const manifest = join(project, 'reactor.yaml');
  const text = readFileSync(manifest, 'utf8');
  expect(text.trimEnd().endsWith('  port: 8080')).toBe(true);
  writeFileSync(manifest, `${text.trimEnd()}\n  encoding: rgb\n`);
}, 120_000);

type Welcome = { type: 'welcome'; clientId: string; state: Record<string, unknown>; schema: { state: { properties: Record<string, { default?: unknown }> } } };
type Seen = { welcome: number; bytes: Uint8Array };

describe('reactor dev keeps the clients connected', () => {
  it('swaps the app half under an open socket (state carried, new frames), on a state class change sends the defaults and state_reset, and restarts the server for a server: key change', async () => {
    const req = createRequire(join(project, 'package.json'));
    const ws = (await import(pathToFileURL(req.resolve('ws')).href)) as { WebSocket?: unknown; default?: unknown };
    const WS = (ws.WebSocket ?? ws.default) as new (url: string) => {
      on(e: 'message', f: (d: Buffer, binary: boolean) => void): void;
      on(e: 'close', f: (code: number, reason: Buffer) => void): void;
      on(e: 'open', f: () => void): void;
      send(s: string): void;
      close(): void;
    };
    const { decodeFrame } = (await import(pathToFileURL(req.resolve('@reactor/client')).href)) as {
      decodeFrame(b: Uint8Array): { payload: Uint8Array };
    };

    const child = spawn(process.execPath, [bin, 'dev', '--port', '0'], { cwd: project, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    const viewers = (): string[] => [...out.matchAll(/Viewer: (\S+)/g)].map((m) => m[1]!);
    let closed: string | undefined;
    try {
      await until(
        () => viewers().length === 1,
        () => `the first server\n${err}`,
        180_000,
      );
      const url = viewers()[0]!;
      const socket = new WS(`ws://${new URL(url).host}/ws`);
      const welcomes: Welcome[] = [];
      const errors: { code: string; id?: string; message: string; afterWelcome: number }[] = [];
      const replies = new Set<string>();
      const frames: Seen[] = [];
      socket.on('close', (code, reason) => (closed = `${code} ${reason.toString()}`));
      socket.on('message', (d, binary) => {
        if (binary) {
          frames.push({ welcome: welcomes.length, bytes: decodeFrame(new Uint8Array(d.buffer, d.byteOffset, d.byteLength)).payload.slice() });
          if (frames.length > 50) frames.shift();
          return;
        }
        const msg = JSON.parse(d.toString()) as { type: string; id?: string; code?: string; message?: string };
        if (msg.type === 'welcome') welcomes.push(msg as Welcome);
        else if (msg.type === 'reply' && msg.id) replies.add(msg.id);
        else if (msg.type === 'error')
          errors.push({ code: msg.code!, message: msg.message!, afterWelcome: welcomes.length, ...(msg.id ? { id: msg.id } : {}) });
      });
      await until(() => welcomes.length === 1, 'the welcome', 30_000);
      socket.send(JSON.stringify({ type: 'command', id: 'p1', name: 'set_prompt', params: { prompt: 'A lighthouse at night.' } }));
      await until(() => replies.has('p1'), `the reply to set_prompt: ${JSON.stringify(errors)}`, 30_000);
      const painted = (f: Seen): boolean => f.bytes.length > 0 && f.bytes.every((b) => b === 201);
      await until(() => frames.some((f) => f.welcome === 1), 'a frame of the first version', 60_000);
      expect(frames.some(painted)).toBe(false);

      // The app half: the new version paints every pixel 201 and has another default prompt.
      const app = join(project, 'src/app.ts');
      const original = readFileSync(app, 'utf8');
      expect(original).toContain('    const r = outcome.result!;\n');
      const v2 = original
        .replace("default: 'A sunset over the sea.'", "default: 'A harbour at dawn.'")
        .replace('    const r = outcome.result!;\n', '    const r = outcome.result!;\n    r.frames.fill(201);\n');
      atomicWrite(app, v2);
      await until(
        () => welcomes.length === 2,
        () => `a second welcome on the same socket\n${err}`,
        180_000,
      );
      const second = welcomes[1]!;
      expect(second.clientId).not.toBe(welcomes[0]!.clientId);
      expect(second.schema.state.properties['prompt']!.default).toBe('A harbour at dawn.');
      // Same state class: the session's value is carried.
      expect(second.state).toEqual({ prompt: 'A lighthouse at night.' });
      expect(err).toMatch(/carried session \S+'s state into the new version \(prompt\); the connected clients kept their connection/);
      // The host logs the swap after the new welcome went out; its stderr line can arrive after the socket's message.
      await until(
        () => /swapped the app under 1 connected client\(s\)/.test(err),
        () => `the swap log line\n${err}`,
        30_000,
      );
      await until(() => frames.some((f) => f.welcome === 2 && painted(f)), 'a frame painted by the new version', 60_000);
      expect(closed).toBeUndefined();
      // The socket still takes commands, answered by the new version.
      socket.send(JSON.stringify({ type: 'command', id: 'p2', name: 'set_prompt', params: { prompt: 'A forest in fog.' } }));
      await until(() => replies.has('p2'), `the reply to set_prompt after the swap: ${JSON.stringify(errors)}`, 30_000);
      await until(
        () => viewers().length === 2,
        () => `the viewer line of the swapped version\n${out}`,
        30_000,
      );
      expect(viewers()).toEqual([url, url]);
      expect(errors).toEqual([]);

      // The state class changes (a new field): the defaults, and a state_reset notice, on the same socket.
      const field = "  @InputField({ default: 1, description: 'How fast.' })\n  @IsInt()\n  speed!: number;\n";
      atomicWrite(
        app,
        v2
          .replace("import { IsString, MaxLength } from 'class-validator';", "import { IsInt, IsString, MaxLength } from 'class-validator';")
          .replace('  prompt!: string;\n', `  prompt!: string;\n\n${field}`),
      );
      await until(
        () => welcomes.length === 3,
        () => `a third welcome on the same socket\n${err}`,
        180_000,
      );
      expect(welcomes[2]!.state).toEqual({ prompt: 'A harbour at dawn.', speed: 1 });
      await until(() => errors.length > 0, 'the state_reset notice', 10_000);
      expect(errors).toHaveLength(1);
      expect(errors[0]).toMatchObject({ code: 'state_reset', afterWelcome: 3 });
      expect(errors[0]!.id).toBeUndefined();
      expect(errors[0]!.message).toContain('started again from the new defaults');
      await until(
        () => /the state class changed: session \S+ starts again from its defaults/.test(err),
        () => `the state reset log line\n${err}`,
        30_000,
      );
      await until(() => frames.some((f) => f.welcome === 3 && painted(f)), 'a frame of the third version', 60_000);
      expect(closed).toBeUndefined();
      socket.send(JSON.stringify({ type: 'command', id: 's1', name: 'set_speed', params: { speed: 3 } }));
      await until(() => replies.has('s1'), `the reply to set_speed: ${JSON.stringify(errors)}`, 30_000);

      // A server: key changed: the server restarts (its options are fixed at start), so the socket
      // closes; a client that reconnects finds the session's state carried.
      const manifest = join(project, 'reactor.yaml');
      atomicWrite(manifest, `${readFileSync(manifest, 'utf8').trimEnd()}\n  heartbeat_ms: 20000\n`);
      await until(
        () => closed !== undefined,
        () => `the socket to close at the server restart\n${err}`,
        180_000,
      );
      expect(closed).toMatch(/^1001 /);
      await until(
        () => viewers().length === 4,
        () => `the restarted server\n${err}`,
        180_000,
      );
      expect(err).toContain('the manifest or the serving flags changed: restarting the server (the clients reconnect)');
      const again = new WS(`ws://${new URL(url).host}/ws`);
      const state = await new Promise<Record<string, unknown>>((done) =>
        again.on('message', (d, binary) => {
          const msg = binary ? undefined : (JSON.parse(d.toString()) as { type: string; state: Record<string, unknown> });
          if (msg?.type === 'welcome') done(msg.state);
        }),
      );
      again.close();
      expect(state).toEqual({ prompt: 'A harbour at dawn.', speed: 3 });

      // A save that changes the tracks restarts the server too; when it also changes the state
      // class, a client coming back (the project's own @reactor/client, which reconnects and asks
      // to resume) is told after its welcome: state_reset, as on an open socket.
      const { connect } = (await import(pathToFileURL(req.resolve('@reactor/client')).href)) as {
        connect(
          url: string,
          o: object,
        ): Promise<{
          on(e: 'welcome', f: (m: { resumed?: boolean; state: Record<string, unknown> }) => void): void;
          on(e: 'error', f: (e: { code?: string; message: string }) => void): void;
          close(): void;
        }>;
      };
      const comeback = await connect(url, { WebSocket: WS });
      const back: { resumed?: boolean; state: Record<string, unknown> }[] = [];
      const told: string[] = [];
      comeback.on('welcome', (m) => back.push(m));
      comeback.on('error', (e) => told.push(`${e.code} ${e.message}`));
      expect(original).toContain('  mainVideo?: Video;\n');
      atomicWrite(app, v2.replace('  mainVideo?: Video;\n', "  mainVideo?: Video;\n\n  @Video({ description: 'A second track.' })\n  sideVideo?: Video;\n"));
      await until(
        () => told.length > 0,
        () => `the returning client told of the reset\n${err}`,
        180_000,
      );
      expect(err).toContain('the tracks changed: restarting the server (the clients reconnect)');
      expect(told).toEqual([expect.stringMatching(/^state_reset .*state class changed/)]);
      expect(back).toHaveLength(1);
      expect(back[0]!.resumed).toBe(false);
      expect(back[0]!.state).toEqual({ prompt: 'A harbour at dawn.' });
      comeback.close();
    } finally {
      const tree = descendants(child.pid!);
      child.kill('SIGTERM');
      await exited;
      await until(() => tree.every((p) => !alive(p)), 'every process of reactor dev to end', 20_000);
    }
    expect(err).toContain('SIGTERM: stopping the server');
  }, 900_000);
});
