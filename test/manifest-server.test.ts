/**
 * `server:` in reactor.yaml, through the door a user takes: `reactor run --manifest` as a child
 * process, and a WebSocket client written against the protocol only (no @reactor/client). Each
 * key reaches the server: the codec and ladder of `server.video` are offered in the welcome, a
 * limit (`max_message_bytes`) is enforced; an unknown key at any level is refused before anything
 * loads; an empty `--token` is a clear usage error.
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { cliSync, runCli } from './fixtures/reactor-cli.js';
import { sampleWorkspace } from './fixtures/sample-workspace.js';

const CONFIG = 'width: 64\nheight: 48\nframesPerChunk: 4\nrolloutChunks: 12\nworldSize: 1\ndevices: cpu\nbackend: wasm\n';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function workspace(server: string): string {
  const dir = sampleWorkspace({ prefix: 'reactor-manifest-server-', config: CONFIG, server });
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** `reactor run --manifest <dir>/reactor.yaml` (`args` after it): resolves with the viewer URL it prints. */
function run(dir: string, env: Record<string, string> = {}, args: string[] = []): Promise<URL> {
  const cli = runCli(dir, env, args);
  cleanups.push(() => cli.stop());
  return cli.url.then((u) => new URL(u));
}

function wsUrl(viewer: URL): string {
  return `ws://${viewer.host}/ws${viewer.search}`;
}

/** The first message the server sends (the welcome), as JSON. */
function welcome(viewer: URL): Promise<{ ws: WebSocket; msg: Record<string, any> }> {
  const ws = new WebSocket(wsUrl(viewer));
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

describe('reactor run --manifest: every server: key reaches the server', () => {
  it('server.video: the welcome offers the codec and the ladder the manifest names', async () => {
    const dir = workspace('{ port: 0, video: { codec: vp8, tiers: [{ name: solo, scale: 1, bitrate: 900000 }] } }');
    const { msg } = await welcome(await run(dir));
    expect(msg['video']?.codecs).toContain('vp8');
    expect(msg['video']?.tiers).toEqual([{ name: 'solo', scale: 1, bitrate: 900_000 }]);
  }, 60_000);

  it('a limit (server.max_message_bytes) is enforced: a bigger text message closes the socket with 1009', async () => {
    const dir = workspace('{ port: 0, max_message_bytes: 1024 }');
    const { ws } = await welcome(await run(dir));
    const closed = new Promise<number>((r) => ws.once('close', (code) => r(code)));
    ws.send(JSON.stringify({ type: 'command', id: 1, name: 'set_prompt', params: { prompt: 'x'.repeat(2000) } }));
    expect(await closed).toBe(1009);
  }, 60_000);

  it('refuses an unknown key at any level of server:, naming it and the keys allowed, before loading anything', () => {
    for (const [server, bad] of [
      ['{ port: 0, prot: 8080 }', 'server.prot: unknown key (allowed: host, port, token,'],
      [
        '{ port: 0, video: { codec: h264, tiers: [{ name: a, scale: 1, bitrate: 100000, fps: 3 }] } }',
        'server.video.tiers.0.fps: unknown key (allowed: name, scale, bitrate)',
      ],
    ] as const) {
      const dir = workspace(server);
      const r = cliSync(['run', '--manifest', join(dir, 'reactor.yaml')]);
      expect(r.status).toBe(1);
      expect(r.stderr).toContain(bad);
      expect(r.stderr).toContain('[manifest_invalid]');
      expect(r.stdout).not.toContain('Viewer:');
    }
  }, 60_000);

  it('a limit out of the server range is named by its manifest key', () => {
    const dir = workspace('{ port: 0, heartbeat_ms: 1 }');
    const r = cliSync(['run', '--manifest', join(dir, 'reactor.yaml')]);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('server.heartbeat_ms must be an integer from 10 to 3600000, got 1');
  }, 60_000);

  it('--token keeps its text as typed (a number-like token is not turned into a number)', async () => {
    const dir = workspace('{ port: 0 }');
    const token = '00123456789012345678';
    const viewer = await run(dir, {}, ['--token', token]);
    expect(viewer.searchParams.get('token')).toBe(token);
    const { msg } = await welcome(viewer);
    expect(msg['type']).toBe('welcome');
  }, 60_000);

  it("--host 0.0.0.0 --token '' is a usage error that says what to do, not a TypeError", () => {
    const dir = workspace('{ port: 0 }');
    const r = cliSync(['run', '--manifest', join(dir, 'reactor.yaml'), '--host', '0.0.0.0', '--token', '']);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain("--token '': an empty token protects nothing");
    expect(r.stderr).toContain('0.0.0.0 without a token needs --insecure');
    expect(r.stderr).toContain('[cli_usage]');
    expect(r.stderr).not.toContain('TypeError');
    expect(r.stderr).not.toContain('leave it out to disable access control');
  }, 60_000);
});
