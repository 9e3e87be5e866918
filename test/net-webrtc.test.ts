/**
 * WebRTC across real (namespaced) networks: `reactor run --manifest` (the moving pattern of
 * scripts/net/pattern-app.mjs, H.264, `server.webrtc` as the test says) in the link's server
 * namespace and Chromium in the
 * viewer namespace, a router between them (scripts/net/impaired-link.mjs: 80 ms round trip,
 * 4 Mbit/s each way; loss and a UDP block set per test). The page is a raw
 * client of the signalling (the browser's RTCPeerConnection; scripts/net/playback.mjs
 * `startRtcClient`). Loose bounds; the figures are bench/webrtc-network.bench.mjs's.
 * - relay-only ICE (`server.webrtc.ice_transport_policy: relay`, the browser relay-only too) through a
 *   real coturn in the server namespace: it plays, every server candidate is a relay on coturn,
 *   the pair is relayed on both ends;
 * - UDP blocked between the two: ICE fails within the connect timeout, the server says
 *   `rtc_state failed` (`rtc_ice_timeout`) and the media comes back on the WebSocket by itself;
 * - 80 ms round trip, 4 Mbit/s, 2 % loss each way: it plays, loss is repaired (NACKs sent), and
 *   the server raised that viewer's playout delay from its NACKs.
 * Needs root (`ip netns`) and coturn; CI runs as root. Skipped, with the reason printed, only off
 * Linux or without root.
 */
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { chromium, type Browser, type Page } from 'playwright-core';
import { createImpairedLink, type ImpairedLink } from '../scripts/net/impaired-link.mjs';
import { startCoturn } from '../scripts/net/coturn.mjs';
import { chromiumOnLink, measure, serveOnLink, startMeter, startRtcClient, type RtcClientState } from '../scripts/net/playback.mjs';

const unavailable = process.platform !== 'linux' || process.getuid?.() !== 0 ? 'needs root on Linux (ip netns); CI runs as root' : undefined;
if (unavailable) console.warn(`WebRTC network test skipped: ${unavailable}`);

const SMALL = { REACTOR_PATTERN_WIDTH: '320', REACTOR_PATTERN_HEIGHT: '180' };

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});
// One link and one browser for the file (the impairments change per test), a server per test.
let link: ImpairedLink;
let browser: Browser;
afterAll(async () => {
  await browser?.close();
  await link?.close();
});

type W = Window & { __rtc: RtcClientState & { pc: RTCPeerConnection } };
const rtc = (page: Page): Promise<RtcClientState> => page.evaluate(() => ({ ...(window as unknown as W).__rtc, pc: undefined }));

/** The browser's selected candidate pair: local and remote candidate types and the remote address. */
const selectedPair = (page: Page) =>
  page.evaluate(async () => {
    const stats = await (window as unknown as W).__rtc.pc.getStats();
    let pair: { local?: string; remote?: string; remoteAddress?: string } | undefined;
    stats.forEach((s) => {
      if (s.type === 'candidate-pair' && s.nominated && s.state === 'succeeded') {
        const remote = stats.get(s.remoteCandidateId);
        pair = { local: stats.get(s.localCandidateId)?.candidateType, remote: remote?.candidateType, remoteAddress: remote?.address };
      }
    });
    return pair;
  });

/** A server with `options` on the link and a fresh page; both closed after the test. */
async function ensureLink(): Promise<ImpairedLink> {
  if (!link) {
    link = await createImpairedLink({ rttMs: 80, rateKbit: 4000 });
    // The raw client needs no secure context (RTCPeerConnection does not ask for one).
    browser = await chromium.launch(chromiumOnLink(link, `http://${link.server.ip}`, ['--autoplay-policy=no-user-gesture-required']));
  }
  return link;
}

async function setup(serverYaml: string[]): Promise<{ page: Page; url: string }> {
  await ensureLink();
  const server = await serveOnLink(link, { serverYaml: ['video: { codec: h264, key_frame_interval: 30 }', ...serverYaml], env: SMALL });
  cleanups.push(() => server.stop());
  const context = await browser.newContext();
  cleanups.push(() => context.close());
  return { page: await context.newPage(), url: server.url };
}

describe.skipIf(unavailable !== undefined)('WebRTC between two network namespaces', () => {
  it('plays through a real coturn with relay-only ICE: only relay candidates, a relayed pair', async () => {
    await ensureLink();
    const turn = await startCoturn({ ip: link.server.ip, spawn: (cmd, args, o) => link.spawn('server', cmd, args, o) });
    cleanups.push(() => turn.stop());
    const ice = { urls: turn.urls, username: turn.username, credential: turn.credential };
    // reactor.yaml: server.webrtc.ice_servers and ice_transport_policy: relay.
    const { page, url } = await setup([
      `webrtc: { ice_servers: [{ urls: "${ice.urls}", username: ${ice.username}, credential: ${ice.credential} }], ice_transport_policy: relay }`,
    ]);
    // The browser needs the TURN server too: Chromium hides its host addresses behind mDNS names
    // (xxxx.local) the server cannot resolve, so the server's relay could permit no address of it.
    await startRtcClient(page, url, { iceServers: [ice], iceTransportPolicy: 'relay' });
    await startMeter(page);
    await page.waitForFunction(() => (window as unknown as W).__rtc.state === 'connected', null, { timeout: 20_000 });
    const m = await measure(page, 3000);
    expect(m.source).toBe('video');
    expect(m.frames).toBeGreaterThan(10);
    const s = await rtc(page);
    expect(s.errors).toEqual([]);
    expect(s.binaryWhileConnected).toBe(0);
    // The server gathered nothing but relay candidates on coturn's address.
    expect(s.candidates.length).toBeGreaterThan(0);
    for (const c of s.candidates) expect(c).toMatch(new RegExp(` ${link.server.ip.replace(/\./g, '\\.')} \\d+ typ relay`));
    expect(await selectedPair(page)).toMatchObject({ local: 'relay', remote: 'relay', remoteAddress: link.server.ip });
  }, 60_000);

  it('with UDP blocked, ICE fails within the connect timeout and the media comes back on the WebSocket by itself', async () => {
    const { page, url } = await setup(['webrtc: { connect_timeout_ms: 3000 }']);
    link.blockUdp(true);
    cleanups.push(async () => link.blockUdp(false));
    await startRtcClient(page, url);
    await startMeter(page);
    const t0 = Date.now();
    await page.waitForFunction(() => (window as unknown as W).__rtc.state === 'failed', null, { timeout: 20_000 });
    expect(Date.now() - t0).toBeLessThan(15_000);
    expect((await rtc(page)).reason).toMatch(/^rtc_ice_timeout/);
    // Back on the WebSocket by itself: binary media frames arrive again, and play.
    await page.waitForFunction(() => (window as unknown as W).__rtc.binaryAfterEnd > 10, null, { timeout: 10_000 });
    expect((await rtc(page)).binaryWhileConnected).toBe(0);
  }, 60_000);

  it("plays over 80 ms, 4 Mbit/s, 2 % loss each way, repairing loss with NACKs, and the server raises that viewer's playout delay", async () => {
    const { page, url } = await setup([]);
    await startRtcClient(page, url);
    await startMeter(page);
    await page.waitForFunction(() => (window as unknown as W).__rtc.state === 'connected', null, { timeout: 20_000 });
    // The path is the server's host candidate on the link (read before the loss: a consent check
    // lost later may leave no pair both nominated and succeeded in one getStats() snapshot).
    expect(await selectedPair(page)).toMatchObject({ remote: 'host', remoteAddress: link.server.ip });
    // The loss starts once connected: this is about playing through it (a DTLS handshake that
    // loses its flights waits out werift's retransmission timers, which is not what this measures).
    link.setLoss(0.02);
    cleanups.push(async () => link.setLoss(0));
    const m = await measure(page, 5000);
    expect(m.source).toBe('video');
    expect(m.frames).toBeGreaterThan(20);
    expect(m.maxGapMs).toBeLessThan(3000);
    // At 320x180 a frame is a packet or two, so 5 s of a busy machine's frames may lose none
    // (0.98^200 is 2 %): wait for the first NACK rather than judge one fixed sample.
    const nacks = async (): Promise<number> =>
      page.evaluate(async () => {
        let n = 0;
        (await (window as unknown as W).__rtc.pc.getStats()).forEach((s) => s.type === 'inbound-rtp' && s.kind === 'video' && (n = s.nackCount));
        return n;
      });
    const nackDeadline = Date.now() + 20_000;
    while ((await nacks()) < 1 && Date.now() < nackDeadline) await new Promise((r) => setTimeout(r, 250));
    expect(await nacks()).toBeGreaterThan(0);
    // The server saw this viewer's NACKs and raised its playout delay off 0..0, so a repair no
    // longer stalls the frames behind it (rtc-playout-delay.ts; GET /metrics).
    // It takes 2 NACK messages within 5 s, so wait for the raise too (it comes with the next NACKs).
    const raises = async (): Promise<number> =>
      Number(
        /^reactor_webrtc_playout_delay_raises_total (\d+)/m.exec(await page.evaluate(async () => (await fetch(`/metrics${location.search}`)).text()))?.[1] ?? 0,
      );
    const deadline = Date.now() + 20_000;
    while ((await raises()) < 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 250));
    expect(await raises()).toBeGreaterThanOrEqual(1);
  }, 90_000);
});
