/**
 * `server.webrtc` in reactor.yaml and its `REACTOR_WEBRTC_*` environment, through the door a user
 * takes: `reactor run --manifest` as a child process, and a WebRTC offer from werift (a Node
 * RTCPeerConnection) sent over a raw WebSocket. The UDP port range and the advertised address
 * show in the server's ICE candidates; the environment wins over the manifest; `enabled: false`
 * answers `rtc_disabled`; `client_ice_servers` and `turn_secret` (or `REACTOR_WEBRTC_TURN_SECRET`)
 * reach the client in `welcome.webrtc`, a TURN credential minted for it; a bad value is named by
 * its manifest key or variable before anything loads.
 */
import { createHmac } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { RTCPeerConnection, RTCRtpCodecParameters, useNACK, usePLI, useREMB } from 'werift';
import { cliSync, runCli } from './fixtures/reactor-cli.js';
import { sampleWorkspace } from './fixtures/sample-workspace.js';

const CONFIG = 'width: 64\nheight: 48\nframesPerChunk: 4\nrolloutChunks: 12\nworldSize: 1\ndevices: cpu\nbackend: wasm\n';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function workspace(server: string): string {
  const dir = sampleWorkspace({ prefix: 'reactor-manifest-webrtc-', config: CONFIG, server });
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** `reactor run --manifest <dir>/reactor.yaml` with `env` added: resolves with the viewer URL it prints. */
function run(dir: string, env: Record<string, string> = {}): Promise<URL> {
  const cli = runCli(dir, env);
  cleanups.push(() => cli.stop());
  return cli.url.then((u) => new URL(u));
}

/** Offers recvonly video from werift; collects the server's answer, then its candidates and errors for `ms` more. */
async function offer(viewer: URL, ms = 1500): Promise<{ answer?: string; candidates: string[]; errors: string[] }> {
  const ws = new WebSocket(`ws://${viewer.host}/ws`);
  // werift offers VP8 only by default: a Node viewer of an H.264 server names H.264 (packetization-mode 1).
  const h264 = new RTCRtpCodecParameters({
    mimeType: 'video/H264',
    clockRate: 90000,
    rtcpFeedback: [useNACK(), usePLI(), useREMB()],
    parameters: 'level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f',
  });
  const pc = new RTCPeerConnection({ codecs: { video: [h264] } });
  cleanups.push(() => {
    ws.terminate();
    return pc.close();
  });
  const got: { answer?: string; candidates: string[]; errors: string[] } = { candidates: [], errors: [] };
  await new Promise<void>((res, rej) => {
    ws.once('error', rej);
    ws.on('message', (data, binary) => {
      if (binary) return;
      const msg = JSON.parse(data.toString()) as Record<string, any>;
      if (msg['type'] === 'welcome') res();
      if (msg['type'] === 'rtc_answer') got.answer = msg['sdp'];
      if (msg['type'] === 'rtc_candidate') got.candidates.push(msg['candidate']);
      if (msg['type'] === 'error') got.errors.push(msg['code']);
    });
  });
  pc.addTransceiver('video', { direction: 'recvonly' });
  await pc.setLocalDescription(await pc.createOffer());
  ws.send(JSON.stringify({ type: 'rtc_offer', sdp: pc.localDescription!.sdp }));
  // The server loads werift on its first offer: wait for the answer (or an error), then for the trickle.
  for (let t = 0; t < 150 && got.answer === undefined && got.errors.length === 0; t++) await new Promise((r) => setTimeout(r, 100));
  await new Promise((r) => setTimeout(r, ms));
  return got;
}

/** The welcome of a raw WebSocket client. */
async function welcome(viewer: URL): Promise<Record<string, any>> {
  const ws = new WebSocket(`ws://${viewer.host}/ws`);
  cleanups.push(() => ws.terminate());
  return new Promise((res, rej) => {
    ws.once('error', rej);
    ws.on('message', (data, binary) => {
      const msg = binary ? undefined : (JSON.parse(data.toString()) as Record<string, any>);
      if (msg?.['type'] === 'welcome') res(msg);
    });
  });
}

/** The server's candidates, from the answer SDP and the trickled ones: `{ address, port }`. */
function candidates(r: { answer?: string; candidates: string[] }): { address: string; port: number }[] {
  const lines = [
    ...(r.answer ?? '')
      .split(/\r?\n/)
      .filter((l) => l.startsWith('a=candidate:'))
      .map((l) => l.slice(2)),
    ...r.candidates,
  ];
  return lines.map((l) => {
    const f = l.split(' ');
    return { address: f[4]!, port: Number(f[5]) };
  });
}

const base = 42_000 + Math.floor(Math.random() * 8000);

describe('reactor run --manifest: server.webrtc', () => {
  it('binds its UDP ports in udp_port_range and advertises advertise_address', async () => {
    const dir = workspace(`{ port: 0, video: { codec: h264 }, webrtc: { udp_port_range: [${base}, ${base + 20}], advertise_address: 10.11.12.13 } }`);
    const r = await offer(await run(dir));
    expect(r.errors).toEqual([]);
    expect(r.answer).toMatch(/^v=0/);
    const c = candidates(r);
    expect(c.length).toBeGreaterThan(0);
    for (const { port } of c) {
      expect(port).toBeGreaterThanOrEqual(base);
      expect(port).toBeLessThanOrEqual(base + 20);
    }
    expect(c.map((x) => x.address)).toContain('10.11.12.13');
  }, 60_000);

  it('looks up no STUN server when server.webrtc names none (werift would fall back to Google), and the one it names otherwise', async () => {
    const watch = { NODE_OPTIONS: `--require ${join(import.meta.dirname, 'fixtures/log-dns.cjs')}` };
    const none = runCli(workspace('{ port: 0, video: { codec: h264 } }'), watch);
    cleanups.push(() => none.stop());
    const r = await offer(new URL(await none.url), 300);
    expect(r.errors).toEqual([]);
    expect(r.answer).toMatch(/^v=0/);
    expect(candidates(r).length).toBeGreaterThan(0);
    expect(none.stderr()).not.toMatch(/\[dns\] .*stun/i);
    // The watch sees a STUN server that is configured (.invalid never resolves: its lookup is all there is to see).
    const named = runCli(workspace('{ port: 0, video: { codec: h264 }, webrtc: { ice_servers: [{ urls: "stun:stun.example.invalid:3478" }] } }'), watch);
    cleanups.push(() => named.stop());
    const r2 = await offer(new URL(await named.url), 300);
    expect(r2.answer).toMatch(/^v=0/);
    expect(named.stderr()).toMatch(/\[dns\] stun\.example\.invalid/);
    expect(named.stderr()).not.toMatch(/\[dns\] stun\.l\.google\.com/);
  }, 60_000);

  it('answers on a fixed port (and the next one: werift binds a socket per local address)', async () => {
    const fixed = base + 200;
    const r = await offer(await run(workspace(`{ port: 0, video: { codec: h264 }, webrtc: { port: ${fixed} } }`)));
    expect(r.errors).toEqual([]);
    expect(r.answer).toMatch(/^v=0/);
    const ports = candidates(r).map((x) => x.port);
    expect(ports.length).toBeGreaterThan(0);
    for (const p of ports) expect(p === fixed || p === fixed + 1, `port ${p}`).toBe(true);
  }, 60_000);

  it('lets REACTOR_WEBRTC_UDP_PORT_RANGE win over the manifest, and REACTOR_WEBRTC_ENABLED=0 turn it off', async () => {
    const dir = workspace(`{ port: 0, video: { codec: h264 }, webrtc: { udp_port_range: [${base}, ${base + 20}] } }`);
    const other = base + 100;
    const r = await offer(await run(dir, { REACTOR_WEBRTC_UDP_PORT_RANGE: `${other}-${other + 20}` }));
    const ports = candidates(r).map((x) => x.port);
    expect(ports.length).toBeGreaterThan(0);
    for (const p of ports) expect(p >= other && p <= other + 20, `port ${p}`).toBe(true);

    const off = await offer(await run(workspace('{ port: 0, video: { codec: h264 } }'), { REACTOR_WEBRTC_ENABLED: '0' }), 500);
    expect(off.errors).toEqual(['rtc_disabled']);
    expect(off.answer).toBeUndefined();
  }, 60_000);

  it('gives clients client_ice_servers in the welcome, TURN credentials minted from REACTOR_WEBRTC_TURN_SECRET over turn_secret', async () => {
    const dir = workspace(
      '{ port: 0, webrtc: { ice_servers: [{ urls: "stun:127.0.0.1:3478" }], client_ice_servers: [{ urls: "turn:turn.example.com:3478" }], turn_secret: from-yaml, turn_credential_ttl_s: 3600, connect_timeout_ms: 7000 } }',
    );
    const w = await welcome(await run(dir, { REACTOR_WEBRTC_TURN_SECRET: 'from-env' }));
    expect(w['webrtc']).toMatchObject({ iceTransportPolicy: 'all', connectTimeoutMs: 7000, iceServers: [{ urls: 'turn:turn.example.com:3478' }] });
    const turn = w['webrtc'].iceServers[0] as { username: string; credential: string };
    expect(turn.username).toMatch(new RegExp(`^\\d+:${w['clientId']}$`));
    expect(Number(turn.username.split(':')[0]) - Date.now() / 1000).toBeGreaterThan(3600 - 120);
    expect(turn.credential).toBe(createHmac('sha1', 'from-env').update(turn.username).digest('base64'));
  }, 60_000);

  it('names a bad value by its manifest key or environment variable, and serves nothing', () => {
    const ice = cliSync(['run', '--manifest', join(workspace('{ port: 0, webrtc: { client_ice_servers: [{ urls: "turn:t:3478" }] } }'), 'reactor.yaml')]);
    expect(ice.status).toBe(1);
    expect(ice.stderr).toContain(
      "server.webrtc.client_ice_servers[0] is a TURN server: it needs a username and a credential, or server.webrtc.turn_secret (coturn's static-auth-secret) to mint them",
    );

    const dir = workspace('{ port: 0, webrtc: { udp_port_range: [5000, 4000] } }');
    const r = cliSync(['run', '--manifest', join(dir, 'reactor.yaml')]);
    expect(r.status).toBe(1);
    expect(r.stdout).not.toContain('Viewer:');
    expect(r.stderr).toContain('server.webrtc.udp_port_range must be [min, max]');

    const e = cliSync(['run', '--manifest', join(workspace('{ port: 0 }'), 'reactor.yaml')], { REACTOR_WEBRTC_UDP_PORT_RANGE: 'lots' });
    expect(e.status).toBe(1);
    expect(e.stderr).toContain('REACTOR_WEBRTC_UDP_PORT_RANGE="lots" is not a range such as 40000-40100');
  }, 60_000);
});
