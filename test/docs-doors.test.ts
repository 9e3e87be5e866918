/**
 * What the docs promise, through the doors the docs name. Every `reactor.yaml` block (a ```yaml
 * fence holding a `runtime:` section) and every command block (```sh, ```bash, ```shell) of
 * README.md and docs/*.md is extracted here and has a check in CHECKS that runs it the way a user
 * would: the manifest as written through `reactor run --manifest` (a child process, on port 0),
 * the command line through the CLI as typed, with an assertion for each effect the doc names
 * (the codec a manifest asks for is the one a client is offered, a limit is enforced, a flag
 * exists). A block without a check fails the first test; a check whose block is gone fails it too.
 * Other fences (```ts, ```json, diagrams) are not extracted.
 *
 * Adding a check for a new doc block (any lane):
 *  1. Put a marker on the line right before the fence: `<!-- doc-check: my-block-id -->` (ids:
 *     lower-case letters, digits, `-`). Without a marker the block's id is its fingerprint,
 *     `<file>@<first 10 hex of sha1(body)>`, printed by the failing first test; a marker keeps the
 *     id stable when the block is edited, so prefer it.
 *  2. Add an entry to CHECKS below: `'my-block-id': { what: 'what it proves', run: async (b) => {...} }`.
 *     `b.body` is the block's text, `b.commands` its command lines (comments and `\` line
 *     continuations folded). Run what the block says, with the helpers:
 *       - `serveManifest(yaml, files?, links?)`: writes the manifest (and any files it names) into a temp
 *         folder where `apps/` is this repository's, runs `reactor run --manifest ... --port 0`,
 *         resolves with the viewer URL (the child is stopped after the test);
 *       - `welcome(url)`: the server's first message to a raw WebSocket client;
 *       - `reactor(args, opts?)`: the built CLI as a child process: `{ code, stdout, stderr }`;
 *       - `documentedFlagsExist(line)`: every `--flag` of a `reactor <command>` line is one that
 *         `reactor <command> --help` lists;
 *       - `shell(script, env?)`: bash, for a documented shell line itself.
 *     Assert each effect the doc names. A step that cannot run here (it needs Docker, a cluster,
 *     or it is `pnpm test` itself) says so in `what` and checks what it can (the files and flags
 *     it names exist), never nothing.
 *  3. Keep it to a few seconds: the servers run the small sample config from `smallConfig`.
 * One build is shared (the suite runs after `pnpm build`); nothing binds a fixed port.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash, createPublicKey, generateKeyPairSync } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { jwtVerify } from 'jose';
import { createImpairedLink } from '../scripts/net/impaired-link.mjs';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { parse as parseYaml } from 'yaml';
import { CLIENT_MESSAGE_TYPES } from '@reactor/client';

const repo = resolve(import.meta.dirname, '..');
const cliMain = join(repo, 'packages/cli/dist/main.js');
const scratch = mkdtempSync(join(tmpdir(), 'reactor-docs-doors-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

// ---- extraction --------------------------------------------------------------------------

/** One extracted doc block. */
interface DocBlock {
  /** The marker's id, else `<file>@<sha1 prefix>`. */
  id: string;
  file: string;
  line: number;
  kind: 'manifest' | 'commands';
  body: string;
  /** Command lines (commands blocks): comments dropped, `\` continuations joined. */
  commands: string[];
}

const SHELL = new Set(['sh', 'bash', 'shell']);

function docFiles(): string[] {
  return [
    'README.md',
    ...readdirSync(join(repo, 'docs'))
      .filter((f) => f.endsWith('.md'))
      .sort()
      .map((f) => `docs/${f}`),
  ];
}

function commandLines(body: string): string[] {
  // `\` continuations, and synopsis lines that go on indented with `[--flag ...]`, belong to the line above.
  const joined = body.replace(/\\\n\s*/g, ' ').replace(/\n\s+(?=\[)/g, ' ');
  return joined
    .split('\n')
    .map((l) => l.replace(/(^|\s)#.*$/, '').trim())
    .filter(Boolean);
}

function extract(): DocBlock[] {
  const blocks: DocBlock[] = [];
  for (const file of docFiles()) {
    const text = readFileSync(join(repo, file), 'utf8');
    const fence = /^( *)```(\w*)[^\n]*\n([\s\S]*?)^\1```/gm;
    for (const m of text.matchAll(fence)) {
      const lang = m[2]!;
      const indent = m[1]!.length;
      const body = m[3]!
        .split('\n')
        .map((l) => l.slice(Math.min(indent, l.length - l.trimStart().length)))
        .join('\n');
      const isManifest = lang === 'yaml' && /^runtime:/m.test(body);
      if (!isManifest && !SHELL.has(lang)) continue;
      const before = text.slice(0, m.index).replace(/\s*$/, '');
      // The marker, possibly followed by other markers (first-app.md's `first-app:commands`).
      const marker = /<!-- doc-check: ([a-z0-9-]+) -->(?:\s*<!--[^>]*-->)*$/.exec(before);
      const id = marker ? marker[1]! : `${file}@${createHash('sha1').update(body).digest('hex').slice(0, 10)}`;
      blocks.push({
        id,
        file,
        line: text.slice(0, m.index).split('\n').length,
        kind: isManifest ? 'manifest' : 'commands',
        body,
        commands: isManifest ? [] : commandLines(body),
      });
    }
  }
  return blocks;
}

// ---- helpers for the checks ----------------------------------------------------------------

/** The sample app's config, small enough for a few seconds on CPU ranks. */
const smallConfig = 'width: 64\nheight: 48\nframesPerChunk: 4\nrolloutChunks: 50\nworldSize: 1\ndevices: cpu\nbackend: wasm\n';

function reactor(args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): { code: number; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [cliMain, ...args], { cwd: opts.cwd ?? repo, env: opts.env ?? process.env, encoding: 'utf8', timeout: 60_000 });
  return { code: r.status ?? 1, stdout: r.stdout, stderr: r.stderr };
}

/** bash itself, found on this process's PATH (a check may hand the script a PATH without it). */
const BASH = spawnSync('bash', ['-c', 'command -v bash'], { encoding: 'utf8' }).stdout.trim();

function shell(script: string, env: NodeJS.ProcessEnv = process.env): { code: number; out: string } {
  const r = spawnSync(BASH, ['-c', script], { env, encoding: 'utf8', timeout: 30_000 });
  return { code: r.status ?? 1, out: `${r.stdout}${r.stderr}` };
}

/** A temp folder where `apps/` is this repository's, with `files` written into it and `links` (name: target) linked. */
function workspace(files: Record<string, string> = {}, links: Record<string, string> = {}): string {
  const dir = mkdtempSync(join(scratch, 'ws-'));
  symlinkSync(join(repo, 'apps'), join(dir, 'apps'));
  for (const [name, target] of Object.entries(links)) symlinkSync(target, join(dir, name));
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, name)), { recursive: true });
    writeFileSync(join(dir, name), text);
  }
  return dir;
}

/** A server from `args` (a `reactor` command line), stopped after the test: resolves with its viewer URL. */
function serve(args: string[], cwd: string, command = process.execPath, env: NodeJS.ProcessEnv = process.env): Promise<URL> {
  const child: ChildProcess = spawn(command, command === process.execPath ? [cliMain, ...args] : args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  cleanups.push(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
  });
  return new Promise((res, rej) => {
    child.stdout!.on('data', () => {
      const m = /Viewer: (\S+)/.exec(out);
      if (m) res(new URL(m[1]!));
    });
    child.once('exit', (code) => rej(new Error(`${args.join(' ')} exited with ${code} before serving:\n${out}`)));
  });
}

/** `reactor run --manifest <yaml> --port 0` in a {@link workspace}. */
function serveManifest(yaml: string, files: Record<string, string> = {}, links: Record<string, string> = {}): Promise<URL> {
  const dir = workspace({ 'reactor.yaml': yaml, ...files }, links);
  return serve(['run', '--manifest', join(dir, 'reactor.yaml'), '--port', '0'], dir);
}

function welcome(url: URL): Promise<{ ws: WebSocket; msg: Record<string, any> }> {
  const ws = new WebSocket(`ws://${url.host}/ws${url.search}`);
  cleanups.push(() => ws.terminate());
  return new Promise((res, rej) => {
    ws.once('error', rej);
    ws.on('message', (data, binary) => {
      if (binary) return;
      const msg = JSON.parse(data.toString()) as Record<string, any>;
      if (msg['type'] === 'welcome') res({ ws, msg });
    });
  });
}

const helpCache = new Map<string, Set<string>>();
/** The flags `reactor <command> --help` lists (asked once per command). */
function helpFlags(command: string): Set<string> {
  let flags = helpCache.get(command);
  if (!flags) {
    const r = reactor([command, '--help']);
    expect(r.code, r.stderr).toBe(0);
    flags = new Set([...r.stdout.matchAll(/--[a-z][a-z-]*/g)].map((m) => m[0]));
    helpCache.set(command, flags);
  }
  return flags;
}

/** Every `--flag` of a documented `reactor <command> ...` line is one its `--help` lists. */
function documentedFlagsExist(line: string): void {
  const m = /\breactor (\w+)(.*)$/.exec(line);
  expect(m, `not a reactor command line: ${line}`).not.toBeNull();
  const flags = helpFlags(m![1]!);
  for (const f of m![2]!.matchAll(/--[a-z][a-z-]*/g)) expect(flags, `reactor ${m![1]} --help lists ${f[0]}`).toContain(f[0]);
}

/** The first binary message (a frame) a client of `url` receives. */
async function firstFrame(url: URL): Promise<Buffer> {
  const { ws } = await welcome(url);
  return new Promise((res) => ws.on('message', (data, binary) => binary && res(data as Buffer)));
}

/** `VAR=value` prefixes of a documented command line, and the command after them. */
function envPrefix(line: string): { env: Record<string, string>; command: string } {
  const env: Record<string, string> = {};
  let rest = line;
  for (let m = /^([A-Z_]+)=(\S+)\s+/.exec(rest); m; m = /^([A-Z_]+)=(\S+)\s+/.exec(rest)) {
    env[m[1]!] = m[2]!;
    rest = rest.slice(m[0].length);
  }
  return { env, command: rest };
}

/** The Python with NumPy and torch (Debian's, in CI: the pyenv python3 first on PATH has no torch). */
const PY = process.env['REACTOR_PYTHON'] ?? '/usr/bin/python3';

function filesExist(...paths: string[]): void {
  for (const p of paths) expect(existsSync(join(repo, p)), `${p} exists`).toBe(true);
}

// ---- the checks ------------------------------------------------------------------------------

interface Check {
  /** What the check proves (and, for a step it cannot run here, why not). */
  what: string;
  run: (block: DocBlock) => Promise<void> | void;
}

/** The README's first command block, its first line: pnpm 12 installed only when it is missing. */
async function pnpmInstallLine(line: string): Promise<void> {
  const bin = join(scratch, `fake-bin-${Date.now()}`);
  mkdirSync(bin);
  const log = join(bin, 'npm.log');
  const fake = (name: string, body: string): void => {
    writeFileSync(join(bin, name), `#!/bin/bash\n${body}\n`);
    chmodSync(join(bin, name), 0o755);
  };
  // npm records its arguments and "installs" a pnpm 12.
  fake('npm', `echo "$@" >> ${log}\nprintf '#!/bin/bash\\necho 12.21.0\\n' > ${bin}/pnpm && chmod +x ${bin}/pnpm`);
  // A PATH with the fakes and the two tools the line uses, and no other pnpm.
  const tools = join(bin, 'tools');
  mkdirSync(tools);
  for (const tool of ['grep', 'chmod']) symlinkSync(shell(`command -v ${tool}`).out.trim(), join(tools, tool));
  const env = { ...process.env, PATH: `${bin}:${tools}` };
  // No pnpm: npm installs it, and pnpm is on PATH afterwards.
  let r = shell(`${line} && pnpm --version`, env);
  expect(r.code, r.out).toBe(0);
  expect(readFileSync(log, 'utf8')).toBe('install -g pnpm@12\n');
  expect(r.out).toContain('12.21.0');
  // pnpm 12 there: npm is not run at all.
  rmSync(log);
  r = shell(line, env);
  expect(r.code, r.out).toBe(0);
  expect(existsSync(log)).toBe(false);
  // Another pnpm: npm installs 12.
  fake('pnpm', 'echo 9.15.0');
  r = shell(line, env);
  expect(r.code, r.out).toBe(0);
  expect(readFileSync(log, 'utf8')).toBe('install -g pnpm@12\n');
}

const CHECKS: Record<string, Check> = {
  'readme-first-commands': {
    what:
      'line 1 installs pnpm 12 only when pnpm --version is not 12 (fake npm/pnpm on PATH); line 2: pnpm start builds what changed and serves the sample app (run as typed, on --port 0); ' +
      'line 3 (pnpm test) is not run here, being this suite: its script is checked',
    run: async (b) => {
      expect(b.commands).toHaveLength(3);
      await pnpmInstallLine(b.commands[0]!);
      expect(b.commands[1]).toBe('pnpm install && pnpm start');
      const url = await serve(['start', '--port', '0'], repo, 'pnpm');
      const { msg } = await welcome(url);
      expect(msg['schema']?.app?.name).toBe('reactor-video');
      expect(b.commands[2]).toBe('pnpm test');
      const scripts = (JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
      expect(scripts['test']).toMatch(/vitest run$/);
    },
  },
  'readme-cli': {
    what: "every command of the bin has a line, each line names flags its --help lists; reactor schema prints the sample app's schema as JSON",
    run: (b) => {
      const lines = b.commands.filter((l) => l.startsWith('pnpm reactor '));
      // Every command of the bin is in the block.
      const main = readFileSync(join(repo, 'packages/cli/src/main.ts'), 'utf8');
      const commands = [...main.matchAll(/\.command\('(\w+)/g)].map((m) => m[1]!);
      expect(lines.map((l) => l.split(' ')[2]).sort()).toEqual([...new Set(commands)].sort());
      for (const line of lines) documentedFlagsExist(line);
      const schema = reactor(['schema']);
      expect(schema.code, schema.stderr).toBe(0);
      expect((JSON.parse(schema.stdout) as { app: { name: string } }).app.name).toBe('reactor-video');
    },
  },
  'readme-camera': {
    what: 'the camera sample serves from its own manifest (run as typed, on --port 0) and asks for the webcam track',
    run: async (b) => {
      expect(b.commands).toEqual(['pnpm install && pnpm build', 'pnpm reactor run --manifest apps/camera/reactor.yaml']);
      const url = await serve(['reactor', 'run', '--manifest', 'apps/camera/reactor.yaml', '--port', '0'], repo, 'pnpm');
      const { msg } = await welcome(url);
      expect((msg['schema']?.tracks as Array<{ name: string; direction?: string }>).map((t) => t.name)).toContain('webcam');
    },
  },
  'readme-manifest': {
    what: 'the README manifest as written (a my-app whose dist/index.js is the sample app) serves, and its server.video reaches the clients: codec h264 and the two tiers offered',
    run: async (b) => {
      const doc = parseYaml(b.body) as { server: { video: { codec: string; tiers: unknown[] } } };
      const url = await serveManifest(
        b.body,
        {
          'dist/index.js': `export { VideoApp as MyApp } from '${join(repo, 'apps/video/dist/index.js')}';\n`,
          'config.yaml': smallConfig,
        },
        { weights: join(repo, 'apps/video/weights') },
      );
      const { msg } = await welcome(url);
      expect(msg['video']?.codecs).toContain(doc.server.video.codec);
      expect(msg['video']?.tiers).toEqual(doc.server.video.tiers);
    },
  },
  'protocol-limits-manifest': {
    what: 'the limits set under server: are enforced: a text message over max_message_bytes closes the socket with 1009, one under it does not',
    run: async (b) => {
      const doc = parseYaml(b.body) as { server: { max_message_bytes: number } };
      const url = await serveManifest(b.body);
      const { ws } = await welcome(url);
      const answers: string[] = [];
      ws.on('message', (d, binary) => !binary && answers.push(d.toString()));
      const command = (size: number) => JSON.stringify({ type: 'command', id: String(size), name: 'set_prompt', params: { prompt: 'x'.repeat(size) } });
      ws.send(command(doc.server.max_message_bytes / 2));
      await expect.poll(() => answers.some((a) => a.includes(`"id":"${doc.server.max_message_bytes / 2}"`)), { timeout: 10_000 }).toBe(true);
      const closed = new Promise<number>((r) => ws.once('close', (code) => r(code)));
      ws.send(command(doc.server.max_message_bytes + 100));
      expect(await closed).toBe(1009);
    },
  },
  'first-app-init': {
    what: 'reactor init names a template that exists and flags its --help lists (the walk-through itself runs in test/reactor-init.test.ts)',
    run: (b) => {
      expect(b.commands).toEqual(['pnpm reactor init ~/my-app --template video']);
      documentedFlagsExist(b.commands[0]!);
      filesExist('packages/cli/templates/video');
    },
  },
  'first-app-commands': {
    what: 'install, test and start of a generated project: run by test/reactor-init.test.ts for every template (minutes each), which reads this block by its marker',
    run: (b) => {
      expect(b.commands).toEqual(['pnpm install', 'pnpm test', 'pnpm start']);
      expect(readFileSync(join(repo, 'test/reactor-init.test.ts'), 'utf8')).toContain('<!-- first-app:commands -->');
    },
  },
  'first-app-upgrade': {
    what: 'reactor upgrade exists with the help the doc describes; the upgrade itself (an older vendor/ repacked, then pnpm install) runs in packages/cli/test/upgrade.test.ts',
    run: (b) => {
      expect(b.commands).toEqual(['cd ~/reactor && pnpm reactor upgrade ~/my-app', 'cd ~/my-app && pnpm install && pnpm test']);
      documentedFlagsExist(b.commands[0]!);
      const help = reactor(['--help']);
      expect(help.code).toBe(0);
      expect(help.stdout).toMatch(/upgrade \[dir\] .*repack its vendor\//);
      expect(readFileSync(join(repo, 'packages/cli/test/upgrade.test.ts'), 'utf8')).toContain("reactor(['upgrade'], dir)");
    },
  },
  'deploy-bundle': {
    what: 'the bundle steps need a build machine with apt (minutes): the scripts they name exist and the reactor lines name real flags',
    run: (b) => {
      filesExist('scripts/bundle/make.sh');
      for (const line of b.commands.filter((l) => /\breactor (run|doctor)\b/.test(l))) documentedFlagsExist(line);
    },
  },
  'scale-out-steps': {
    what: 'docker, helm and kubectl need a cluster: the files they name exist; reactor deploy values runs as typed and prints the Helm values',
    run: (b) => {
      filesExist('deploy/docker/Dockerfile', 'deploy/helm/reactor', 'scripts/bundle/make.sh');
      const values = b.commands.find((l) => l.startsWith('pnpm reactor deploy values'));
      expect(values).toBeDefined();
      const r = reactor(['deploy', 'values']);
      expect(r.code, r.stderr).toBe(0);
      expect(parseYaml(r.stdout)).toMatchObject({ app: expect.any(Object) });
    },
  },
  'readme-seed-python': {
    what: "the seed example: reactor doctor with the documented REACTOR_PYTHON passes its Python checks, and reactor run of apps/seed-video's manifest (run as typed, on --port 0) streams frames from Python ranks",
    run: async (b) => {
      expect(b.commands[0]).toBe('pnpm install && pnpm build');
      const doctor = envPrefix(b.commands[1]!);
      expect(doctor.command).toBe('pnpm reactor doctor --manifest apps/seed-video/reactor.yaml');
      expect(doctor.env['REACTOR_PYTHON']).toBe('/usr/bin/python3');
      const d = reactor(['doctor', '--manifest', 'apps/seed-video/reactor.yaml', '--port', '0'], { env: { ...process.env, REACTOR_PYTHON: PY } });
      expect(d.code, d.stdout + d.stderr).toBe(0);
      for (const name of ['python', 'numpy', 'torch']) expect(d.stdout).toMatch(new RegExp(`^ok +${name}:`, 'm'));
      const run = envPrefix(b.commands[2]!);
      expect(run.command).toBe('pnpm reactor run --manifest apps/seed-video/reactor.yaml');
      const url = await serve(['reactor', 'run', '--manifest', 'apps/seed-video/reactor.yaml', '--port', '0'], repo, 'pnpm', {
        ...process.env,
        REACTOR_PYTHON: PY,
      });
      expect((await firstFrame(url)).byteLength).toBeGreaterThan(0);
    },
  },
  'readme-world': {
    what: "the world model: reactor run of apps/world's manifest (run as typed, REACTOR_PYTHON as documented, on --port 0) streams frames and its status says the weights are generated",
    run: async (b) => {
      expect(b.commands[0]).toBe('pnpm install && pnpm build');
      const run = envPrefix(b.commands[1]!);
      expect(run.command).toBe('pnpm reactor run --manifest apps/world/reactor.yaml');
      expect(run.env['REACTOR_PYTHON']).toBe('/usr/bin/python3');
      const url = await serve(['reactor', 'run', '--manifest', 'apps/world/reactor.yaml', '--port', '0'], repo, 'pnpm', { ...process.env, REACTOR_PYTHON: PY });
      const { msg } = await welcome(url);
      expect((msg['session'] as { notice?: string }).notice).toBe("generated weights: the picture is noise; the speed is the real model's");
      expect((await firstFrame(url)).byteLength).toBeGreaterThan(0);
    },
  },
  'tiny-world-recording': {
    what: 'a played tiny-world session as training data: the converter runs (its --help), the train.py flags the block names exist; the conversion itself runs in apps/world/test/tiny-world.test.ts through reactor run',
    run: (b) => {
      expect(b.commands[0]).toBe('cd apps/world/python');
      expect(b.commands[1]).toMatch(/^python3 -m reactor_world\.tiny\.recording \S+\.mp4 .*--out played\.npz$/);
      const help = spawnSync(PY, ['-m', 'reactor_world.tiny.recording', '--help'], { cwd: join(repo, 'apps/world/python'), encoding: 'utf8' });
      expect(help.status, help.stderr).toBe(0);
      expect(help.stdout).toContain('--seq-frames');
      const train = readFileSync(join(repo, 'apps/world/train/train.py'), 'utf8');
      for (const flag of b.commands[2]!.match(/--[\w-]+/g)!) expect(train).toContain(`"${flag}"`);
      expect(readFileSync(join(repo, 'apps/world/test/tiny-world.test.ts'), 'utf8')).toContain("'reactor_world.tiny.recording'");
    },
  },
  'tiny-world-run': {
    what: "the tiny world (docs/tiny-world.md): reactor run of its manifest as typed (on --port 0) streams frames, and its schema publishes the held keys' bindings for the viewer's key caps",
    run: async (b) => {
      expect(b.commands[0]).toBe('pnpm install && pnpm build');
      const run = envPrefix(b.commands[1]!);
      expect(run.command).toBe('pnpm reactor run --manifest apps/world/tiny-world.yaml');
      const url = await serve(['reactor', 'run', '--manifest', 'apps/world/tiny-world.yaml', '--port', '0'], repo, 'pnpm', {
        ...process.env,
        REACTOR_PYTHON: run.env['REACTOR_PYTHON'] ?? PY,
      });
      const { msg } = await welcome(url);
      expect(JSON.stringify(msg['schema'])).toContain('x-reactor-keys');
      expect((await firstFrame(url)).byteLength).toBeGreaterThan(0);
    },
  },
  'readme-token': {
    what: 'reactor token as typed (an Ed25519 private key in REACTOR_AUTH_PRIVATE_KEY, in an app workspace) prints a JWT signed by that key: role spectator, 15 minutes',
    run: async (b) => {
      const { env, command } = envPrefix(b.commands[0]!);
      expect(command).toBe('pnpm reactor token --role spectator --ttl 15m');
      const { privateKey, publicKey } = generateKeyPairSync('ed25519');
      const dir = workspace({
        'reactor.yaml': 'runtime:\n  import: dist/index.js:App\n',
        [env['REACTOR_AUTH_PRIVATE_KEY']!]: privateKey.export({ type: 'pkcs8', format: 'pem' }) as string,
      });
      documentedFlagsExist(command);
      const r = reactor(command.split(' ').slice(2), { cwd: dir, env: { ...process.env, ...env } });
      expect(r.code, r.stderr).toBe(0);
      const { payload } = await jwtVerify(r.stdout.trim(), createPublicKey(publicKey.export({ type: 'spki', format: 'pem' })));
      expect(payload['role']).toBe('spectator');
      expect(payload.exp! - payload.iat!).toBe(15 * 60);
    },
  },
  'deploy-torch': {
    what: 'the PyTorch backend on a GPU host needs one (device machines): the script and the Python package it runs exist, and the reactor doctor line names real flags',
    run: (b) => {
      filesExist('scripts/gpu/enhance-torch.sh', 'apps/enhance/python/reactor_enhance', 'packages/distributed/python/reactor_worker');
      const lines = b.commands.filter((l) => /\breactor doctor\b/.test(l));
      expect(lines).toHaveLength(1);
      for (const line of lines) documentedFlagsExist(line);
    },
  },
  'runner-python-manifest': {
    what: 'runtime.python as written: an app whose pythonWorker() names no worker and no path streams from the worker and folder the manifest names (the interpreter through REACTOR_PYTHON, which the block says wins)',
    run: async (b) => {
      const doc = parseYaml(b.body) as { runtime: { import: string; python: { path: string[]; worker: string } } };
      expect(doc.runtime.python.worker).toBe('video_worker:VideoWorker');
      const url = (p: string): string => JSON.stringify(pathToFileURL(join(repo, p)).href);
      const app = [
        `import { Frames, InputState, Output, ReactorApp, reactorApp, Video } from ${url('packages/runtime/dist/index.js')};`,
        `import { DistributedRunner, pythonWorker } from ${url('packages/distributed/dist/index.js')};`,
        'class Out extends Output {}',
        "Video({ width: 64, height: 48 })(Out.prototype, 'mainVideo');",
        'export class VideoApp extends ReactorApp {',
        '  async load() {',
        `    this.runner = new DistributedRunner(pythonWorker(), { worldSize: 1, devices: 'cpu', logger: this.logger, loadArgs: { weights_root: ${JSON.stringify(join(repo, 'apps/seed-video/weights'))} } });`,
        '    await this.runner.start();',
        '  }',
        '  async generate() {',
        "    const r = await this.runner.generate({ prompt: 'a forest' });",
        '    return new Out({ mainVideo: new Frames(r.frames, [r.count, r.height, r.width, 3]) });',
        '  }',
        '  async unload() { await this.runner.shutdown(); }',
        '}',
        "reactorApp({ name: 'python-manifest', version: '0.0.1', state: InputState, output: Out })(VideoApp);",
        '',
      ].join('\n');
      const dir = workspace(
        { 'reactor.yaml': b.body, [doc.runtime.import.split(':')[0]!]: app },
        { [doc.runtime.python.path[0]!]: join(repo, 'apps/seed-video/worker') },
      );
      const served = await serve(['run', '--manifest', join(dir, 'reactor.yaml'), '--port', '0'], dir, process.execPath, {
        ...process.env,
        REACTOR_PYTHON: PY,
      });
      expect((await firstFrame(served)).byteLength).toBeGreaterThan(0);
    },
  },
  'webrtc-coturn': {
    what:
      "docs/webrtc.md's coturn line, run as written inside a network namespace of its own (its fixed port 3478 then binds nothing of this host), with only " +
      '--db and --pidfile added (a temp folder, not /var/lib/turn): it starts, answers a STUN Binding request on UDP 3478, and refuses an unauthenticated ' +
      'TURN Allocate with 401 and the realm it was given (long-term credentials on)',
    run: async (b) => {
      expect(b.commands).toHaveLength(1);
      const line = b.commands[0]!;
      expect(line).toMatch(/^turnserver -n /);
      const realm = /--realm (\S+)/.exec(line)![1]!;
      if (process.getuid?.() !== 0) throw new Error('this check runs turnserver in a network namespace: it needs root (CI runs as root)');
      const link = await createImpairedLink();
      const dir = mkdtempSync(join(scratch, 'coturn-'));
      try {
        const turn = link.spawn('server', BASH, ['-c', `exec ${line} --db ${dir}/turndb --pidfile ${dir}/turnserver.pid`], {
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        let log = '';
        turn.stdout!.on('data', (d: Buffer) => (log += d.toString()));
        turn.stderr!.on('data', (d: Buffer) => (log += d.toString()));
        const deadline = Date.now() + 15_000;
        while (!log.includes('Total General servers')) {
          if (turn.exitCode !== null || Date.now() > deadline) throw new Error(`turnserver did not start (Debian: apt-get install coturn):\n${log}`);
          await new Promise((r) => setTimeout(r, 50));
        }
        // A STUN Binding request, then a TURN Allocate (REQUESTED-TRANSPORT UDP) without credentials.
        const probe = [
          "const s = require('node:dgram').createSocket('udp4'); const out = {};",
          "const req = (type, attrs) => { const h = Buffer.alloc(20); h.writeUInt16BE(type, 0); h.writeUInt16BE(attrs.length, 2); h.writeUInt32BE(0x2112a442, 4); require('node:crypto').randomFillSync(h, 8, 12); return Buffer.concat([h, attrs]); };",
          'const transport = Buffer.from([0x00, 0x19, 0x00, 0x04, 17, 0, 0, 0]);',
          "s.on('message', (m) => { const type = m.readUInt16BE(0); let realm, code; for (let i = 20; i + 4 <= m.length; ) { const t = m.readUInt16BE(i), l = m.readUInt16BE(i + 2); const v = m.subarray(i + 4, i + 4 + l);",
          '  if (t === 0x0014) realm = v.toString(); if (t === 0x0009) code = v[2] * 100 + v[3]; i += 4 + Math.ceil(l / 4) * 4; }',
          '  if (type === 0x0101) out.binding = true; if (type === 0x0113) out.allocate = { code, realm }; if (out.binding && out.allocate) { console.log(JSON.stringify(out)); process.exit(0); } });',
          "s.send(req(0x0001, Buffer.alloc(0)), 3478, '127.0.0.1'); s.send(req(0x0003, transport), 3478, '127.0.0.1');",
          'setTimeout(() => { console.log(JSON.stringify(out)); process.exit(1); }, 5000);',
        ].join('\n');
        const p = link.spawn('server', process.execPath, ['-e', probe], { stdio: ['ignore', 'pipe', 'inherit'] });
        let answer = '';
        p.stdout!.on('data', (d: Buffer) => (answer += d.toString()));
        await new Promise((r) => p.once('exit', r));
        expect(JSON.parse(answer)).toEqual({ binding: true, allocate: { code: 401, realm } });
        turn.kill('SIGTERM');
      } finally {
        await link.close();
        rmSync(dir, { recursive: true, force: true });
      }
    },
  },
};

// ---- the facts the docs state about the code (doc drift) --------------------------------

describe('docs state what the code does', () => {
  it('docs/errors.md lists every client message type under unknown_message_type', () => {
    const row = readFileSync(join(repo, 'docs/errors.md'), 'utf8')
      .split('\n')
      .find((l) => l.startsWith('| `unknown_message_type`'))!;
    for (const t of CLIENT_MESSAGE_TYPES) expect(row).toContain(`\`${t}\``);
  });

  it('docs/errors.md names the upload routes and their methods', () => {
    const text = readFileSync(join(repo, 'docs/errors.md'), 'utf8');
    const row = (code: string) => text.split('\n').find((l) => l.startsWith(`| \`${code}\``))!;
    expect(row('not_found')).toContain('/uploads');
    expect(row('method_not_allowed')).not.toContain('every route is `GET`');
    expect(row('method_not_allowed')).toMatch(/POST \/uploads/);
  });

  it("the README's layout row for packages/cli names every command of the bin", () => {
    const main = readFileSync(join(repo, 'packages/cli/src/main.ts'), 'utf8');
    const commands = [...main.matchAll(/\.command\('(\w+)/g)].map((m) => m[1]!);
    expect(commands.length).toBeGreaterThanOrEqual(8);
    const row = readFileSync(join(repo, 'README.md'), 'utf8')
      .split('\n')
      .find((l) => l.startsWith('| `packages/cli`'))!;
    for (const c of commands) expect(row).toContain(`\`${c}\``);
  });

  it('docs/first-app.md counts the test files a generated project has', () => {
    const text = readFileSync(join(repo, 'docs/first-app.md'), 'utf8');
    const common = readdirSync(join(repo, 'packages/cli/templates/common/test')).filter((f) => f.endsWith('.test.ts.tmpl'));
    const video = readdirSync(join(repo, 'packages/cli/templates/video/test')).filter((f) => f.endsWith('.test.ts.tmpl'));
    const files = new Set([...common, ...video].map((f) => f.replace('.tmpl', '')));
    const words = ['', 'one', 'two', 'three', 'four', 'five'];
    expect(text).toContain(`\`pnpm test\` builds and runs ${words[files.size]} test files`);
    for (const f of files) expect(text).toContain(`test/${f}`);
  });

  it('docs/decisions.md no longer says pause/resume are not served', () => {
    expect(readFileSync(join(repo, 'docs/decisions.md'), 'utf8')).not.toContain('pause/resume are parsed, not yet served');
  });
});

// ---- every block, its check ----------------------------------------------------------------

const blocks = extract();

describe('every reactor.yaml and command block of the docs has a check', () => {
  it('no block without a check, no check without a block', () => {
    const ids = new Set(blocks.map((b) => b.id));
    const missing = blocks.filter((b) => !(b.id in CHECKS)).map((b) => `  ${b.id} (${b.file}:${b.line}, ${b.kind}): ${b.body.split('\n')[0]}`);
    expect(missing, `doc blocks without a check (add one to CHECKS in test/docs-doors.test.ts; see its header):\n${missing.join('\n')}`).toEqual([]);
    const stale = Object.keys(CHECKS).filter((id) => !ids.has(id));
    expect(stale, 'checks whose doc block is gone (remove them, or restore the marker)').toEqual([]);
    const dupes = blocks.map((b) => b.id).filter((id, i, all) => all.indexOf(id) !== i);
    expect(dupes, 'two blocks with one id').toEqual([]);
  });

  it.each(blocks.filter((b) => b.id in CHECKS).map((b) => [`${b.id} (${b.file}:${b.line}): ${CHECKS[b.id]!.what}`, b] as const))(
    '%s',
    async (_name, block) => {
      if (block.kind === 'manifest') expect(() => parseYaml(block.body), `${block.file}:${block.line} is valid YAML`).not.toThrow();
      await CHECKS[block.id]!.run(block);
    },
    90_000,
  );
});
