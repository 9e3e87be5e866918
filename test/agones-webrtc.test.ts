/**
 * `reactor run --agones` serves WebRTC on the GameServer's `webrtc` port and advertises its node
 * address (what the chart's `webrtc.enabled` declares: a UDP port, `portPolicy: Passthrough`),
 * read from a FAKE Agones SDK sidecar (test/fixtures/agones/sidecar.ts, the official SDK inside
 * the CLI, not a real cluster). A real CLI process serving the moving pattern
 * (scripts/net/pattern-app.mjs, H.264) on loopback; Chromium's RTCPeerConnection as the client
 * (scripts/net/playback.mjs `startRtcClient`): the advertised node address carries that port
 * and the link connects. A GameServer without
 * the port: a warning that says what follows and the fix, and WebRTC still works on its own ports.
 */
import { spawn } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { chromium } from 'playwright-core';
import { FakeAgonesCluster } from './fixtures/agones/cluster.js';
import { FakeAgonesSidecar } from './fixtures/agones/sidecar.js';
import { descendants } from './fixtures/processes.js';
import { startRtcClient, type RtcClientState } from '../scripts/net/playback.mjs';

const repo = resolve(import.meta.dirname, '..');
const cli = join(repo, 'packages/cli/dist/main.js');
const NODE_ADDRESS = '198.51.100.7';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A UDP port free right now (bound, then released). */
async function freeUdpPort(): Promise<number> {
  const s = createSocket('udp4');
  await new Promise<void>((r) => s.bind(0, '127.0.0.1', r));
  const port = s.address().port;
  await new Promise<void>((r) => s.close(r));
  return port;
}

/** `reactor run --agones --manifest` against a fake sidecar whose GameServer has `ports`; the viewer URL and the log. */
async function instance(ports: Record<string, number>): Promise<{ url: string; log: () => string }> {
  const cluster = new FakeAgonesCluster();
  cluster.addServer('reactor-gs-1', NODE_ADDRESS, 7000, {}, { ports });
  const sidecar = await FakeAgonesSidecar.start(cluster, 'reactor-gs-1');
  cleanups.push(() => sidecar.stop());
  const dir = mkdtempSync(join(tmpdir(), 'reactor-agones-webrtc-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(
    join(dir, 'reactor.yaml'),
    [
      'model: { name: agones-webrtc, version: 0.0.1 }',
      'runtime:',
      `  import: ${join(repo, 'scripts/net/pattern-app.mjs')}:PatternApp`,
      'server: { port: 0, video: { codec: h264 } }',
      '',
    ].join('\n'),
  );
  const child = spawn(process.execPath, [cli, 'run', '--agones', '--manifest', join(dir, 'reactor.yaml')], {
    cwd: dir,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, AGONES_SDK_GRPC_PORT: String(sidecar.port), REACTOR_PATTERN_WIDTH: '160', REACTOR_PATTERN_HEIGHT: '96' },
  });
  cleanups.push(() => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    for (const p of descendants(child.pid!)) process.kill(p, 'SIGKILL');
    child.kill('SIGKILL');
  });
  let log = '';
  child.stderr!.on('data', (d: Buffer) => (log += d.toString()));
  const url = await new Promise<string>((res, rej) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      log += d.toString();
      const m = /Viewer: (\S+)/.exec(out);
      if (m) res(m[1]!);
    });
    child.once('exit', (code) => rej(new Error(`reactor run exited with ${code}:\n${log}`)));
  });
  return { url, log: () => log };
}

async function rtcClient(url: string): Promise<() => Promise<RtcClientState>> {
  const browser = await chromium.launch({
    executablePath: process.env['CHROMIUM_PATH'] ?? '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  cleanups.push(() => browser.close());
  const page = await browser.newPage();
  await startRtcClient(page, url);
  await page
    .waitForFunction(() => (window as unknown as { __rtc: RtcClientState }).__rtc.state === 'connected', null, { timeout: 20_000 })
    .catch(async (e) => {
      console.log(JSON.stringify(await page.evaluate(() => ({ ...(window as any).__rtc, pc: undefined }))));
      throw e;
    });
  return () => page.evaluate(() => ({ ...(window as unknown as { __rtc: RtcClientState }).__rtc, pc: undefined }));
}

describe('reactor run --agones: WebRTC on the GameServer port (fake sidecar, not a real cluster)', () => {
  it("binds the GameServer's webrtc port and advertises the node address; the link connects through that port", async () => {
    const port = await freeUdpPort();
    const { url, log } = await instance({ webrtc: port });
    expect(log()).toContain(`WebRTC: media on ${NODE_ADDRESS}:${port}`);
    const state = await rtcClient(url);
    const candidates = (await state()).candidates;
    // The advertised node address on the GameServer's port (the first socket werift binds)...
    expect(candidates.some((c) => c.includes(` ${NODE_ADDRESS} ${port} typ host`))).toBe(true);
    // ...and nothing outside [port, port + 1] (werift's smallest range: the host's own address takes the second).
    for (const c of candidates) expect([port, port + 1]).toContain(Number(/ (\d+) typ /.exec(c)![1]));
  }, 60_000);

  it('without a webrtc port on the GameServer warns with the fix and serves WebRTC on its own ports', async () => {
    const { url, log } = await instance({});
    expect(log()).toMatch(/WebRTC: the GameServer has no port named "webrtc" \(it has: default\).*TURN.*webrtc\.enabled adds the port/);
    const state = await rtcClient(url);
    expect((await state()).candidates.length).toBeGreaterThan(0);
  }, 60_000);
});
