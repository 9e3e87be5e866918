/**
 * The viewer's transport ladder in Chromium (`/?transport=auto`, the 64x64 pattern app in H.264):
 * it plays over WebRTC and shows the transport with RTT, bitrate, fps and freezes, its tier, a live
 * frame number and command-to-pixel samples paired by RTP timestamp (applied.rtpTimestamp); against a
 * server whose WebRTC is off it ends up on the WebSocket and says why; when ICE can never
 * complete (relay-only to a TURN server that does not exist) the server fails the peer after its
 * connect timeout (`rtc_ice_timeout`) and the viewer falls back by itself. Bad signalling from a
 * page script gets its error codes, and the session streams on.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import { serve, type ReactorServer, type ServeOptions } from '@reactor/server';
import { RecordingLogger } from '@reactor/runtime/testing';
import { patternApp } from '../packages/server/test/fixtures/pattern-app.js';
import { quiet } from './fixtures/cleanups.js';
import { launchWithFakeMedia } from './fixtures/chromium.js';
import { RTC_PAGE_SCRIPT, type RtcPageWindow } from './fixtures/rtc-page.js';

let browser: Browser;
const servers: ReactorServer[] = [];

async function start(opts: ServeOptions = {}): Promise<ReactorServer> {
  const server = await serve(patternApp({ width: 64, height: 64, fps: 30 }), { port: 0, gracePeriodMs: 0, logger: quiet, video: { codec: 'h264' }, ...opts });
  servers.push(server);
  await server.loaded;
  return server;
}

beforeAll(async () => {
  browser = await launchWithFakeMedia();
}, 30_000);

afterAll(async () => {
  await browser?.close();
  for (const s of servers) await s.close();
});

interface ViewerWindow {
  reactorViewer: { framesDrawn: number; transport: { current: string; reason?: string; stats?: { rttMs?: number; bitrate?: number } } };
}

async function viewer(server: ReactorServer, transport: string): Promise<Page> {
  const page = await browser.newPage();
  await page.goto(`${server.url}/?transport=${transport}`);
  return page;
}

describe('viewer transport ladder', () => {
  it('plays over WebRTC with ?transport=auto and shows transport, RTT, bitrate, fps and freezes', async () => {
    const server = await start();
    const page = await viewer(server, 'auto');
    await page.waitForFunction(() => (window as unknown as ViewerWindow).reactorViewer.transport?.current === 'webrtc', null, { timeout: 15_000 });
    await expect.poll(() => page.textContent('#transport')).toBe('webrtc');
    const drawn = await page.evaluate(() => (window as unknown as ViewerWindow).reactorViewer.framesDrawn);
    await page.waitForFunction((n) => (window as unknown as ViewerWindow).reactorViewer.framesDrawn > n + 20, drawn, { timeout: 15_000 });
    await expect
      .poll(() => page.textContent('#rtc-stats'), { timeout: 10_000 })
      .toMatch(/^rtt \d+ ms · \d+\.\d\d Mbit\/s · \d+ fps · \d+ freezes \(\d+\.\d s\) · (host|srflx|prflx)\/(host|srflx|prflx)$/);
    expect(server.connections()[0]?.webrtc?.state).toBe('connected');
    // The badge names the path the browser selected: loopback host candidates, UDP.
    await expect.poll(() => page.getAttribute('#transport', 'title'), { timeout: 10_000 }).toBe('media over WebRTC (UDP)');
    await page.close();
  }, 40_000);

  it('measures a WebRTC viewer as WebRTC: its status line follows the link (tier, bitrate, frames), command-to-pixel and a freeze are reported with transport webrtc', async () => {
    const server = await start();
    const page = await viewer(server, 'auto');
    await page.waitForFunction(() => (window as unknown as ViewerWindow).reactorViewer.transport?.current === 'webrtc', null, { timeout: 15_000 });
    // The status line follows the link: the tier the server picked for it (the one the dashboard lists) and its picture size, not the WebSocket receiver's last tier.
    const dashboardTier = async (): Promise<string | undefined> => {
      const data = (await (await fetch(`${server.url}/dashboard/data`)).json()) as { now: { clients: Array<{ transport: string; tier: string }> } };
      const c = data.now.clients[0];
      return c?.transport === 'webrtc' ? c.tier : undefined;
    };
    const picture = (): Promise<string> =>
      page.evaluate(() => {
        const v = document.querySelector<HTMLVideoElement>('video[data-rtc-track]');
        return v ? `${v.videoWidth}x${v.videoHeight}` : '';
      });
    await expect
      .poll(async () => [await page.textContent('#tier'), `${await dashboardTier()} (${await picture()})`], { timeout: 15_000 })
      .toSatisfy(([shown, served]) => shown === served && /^(full|half|low) \(\d+x\d+\)$/.test(shown!));
    expect(await page.textContent('#codec')).toBe('h264');
    // A real bitrate, and a frame number that moves between two frames (not once a second).
    await expect.poll(() => page.textContent('#bitrate'), { timeout: 10_000 }).toMatch(/^(?!0\.00)\d+\.\d\d Mbit\/s$/);
    const frames = Number(await page.textContent('#seq'));
    await page.waitForFunction((n) => Number(document.getElementById('seq')!.textContent) > n, frames, { timeout: 10_000, polling: 'raf' });
    expect(
      await page.evaluate(
        () => (window as unknown as { reactorViewer: { client: { latency: { transport: string } } } }).reactorViewer.client.latency.transport,
      ),
    ).toBe('webrtc');
    // Command-to-pixel over WebRTC: the applied message names the frame's RTP timestamp, the <video> presents it.
    for (const [i, color] of ['green', 'blue', 'red'].entries()) {
      const applied = await page.evaluate(
        (value) =>
          (window as unknown as { reactorViewer: { client: { command(n: string, p: unknown): { applied: Promise<unknown> } } } }).reactorViewer.client.command(
            'set_color',
            { color: value },
          ).applied,
        color,
      );
      expect(applied).toMatchObject({ outcome: 'applied', rtpTimestamp: expect.any(Number) });
      await expect.poll(() => page.textContent('#c2p-samples'), { timeout: 10_000 }).toBe(String(i + 1));
    }
    await expect
      .poll(async () => (await fetch(`${server.url}/metrics`)).text(), { timeout: 15_000 })
      .toMatch(/^reactor_command_to_pixel_seconds_count\{command="set_color",transport="webrtc"\} 3$/m);
    // The server stalls (it shares this process: 600 ms with its event loop blocked); the viewer sees the gap in its WebRTC video.
    const until = performance.now() + 600;
    while (performance.now() < until) {
      // blocked
    }
    await expect
      .poll(async () => (await fetch(`${server.url}/metrics`)).text(), { timeout: 15_000 })
      .toMatch(/^reactor_client_freezes_total\{transport="webrtc"\} [1-9]/m);
    await page.close();
  }, 40_000);

  it('falls back to the WebSocket and says why when the server has WebRTC off', async () => {
    const server = await start({ webrtc: { enabled: false } });
    const page = await viewer(server, 'auto');
    await expect.poll(() => page.textContent('#transport'), { timeout: 15_000 }).toBe('websocket (WebRTC failed)');
    expect(await page.getAttribute('#transport', 'title')).toContain('rtc_disabled');
    await page.waitForFunction(() => (window as unknown as ViewerWindow).reactorViewer.framesDrawn > 10, null, { timeout: 15_000 });
    await page.close();
  }, 40_000);

  it('falls back by itself when ICE never completes: rtc_state failed with rtc_ice_timeout, said once; the server says its TURN gave no relay', async () => {
    const log = new RecordingLogger();
    const server = await start({
      logger: log,
      webrtc: { iceTransportPolicy: 'relay', iceServers: [{ urls: 'turn:127.0.0.1:9', username: 'u', credential: 'p' }], connectTimeoutMs: 1500 },
    });
    const page = await viewer(server, 'auto');
    await expect.poll(() => page.textContent('#transport'), { timeout: 15_000 }).toBe('websocket (WebRTC failed)');
    expect(await page.getAttribute('#transport', 'title')).toContain('rtc_ice_timeout');
    // Told once, with the reason once (the link reports its failure as a state and as the rejection of `ready`).
    const fallbacks = (await page.$$eval('#messages li', (li) => li.map((x) => x.textContent ?? ''))).filter((t) => t.includes('WebRTC failed'));
    expect(fallbacks).toHaveLength(1);
    expect(fallbacks[0]).not.toMatch(/WebRTC failed.*WebRTC failed/);
    // The server's own TURN allocation came to nothing: it says so, naming the setting.
    expect(log.at('warn').join('\n')).toMatch(/no TURN relay candidate from turn:127\.0\.0\.1:9: .*server\.webrtc\.ice_servers/);
    await page.waitForFunction(() => (window as unknown as ViewerWindow).reactorViewer.framesDrawn > 10, null, { timeout: 15_000 });
    // The failed peer is closed on the server.
    await expect.poll(() => server.connections()[0]?.webrtc).toBeUndefined();
    expect(await (await fetch(`${server.url}/metrics`)).text()).toMatch(/^reactor_webrtc_peer_outcomes_total\{outcome="failed"\} 1$/m);
    await page.close();
  }, 40_000);
});

type W = Window & RtcPageWindow;

describe('bad WebRTC signalling', () => {
  let server: ReactorServer;
  let page: Page;
  beforeAll(async () => {
    server = await start();
    page = await browser.newPage();
    await page.goto(`${server.url}/health`);
    await page.addScriptTag({ content: RTC_PAGE_SCRIPT });
  }, 30_000);

  it('answers malformed SDP, an offer without our codec, and bad candidates with their codes, and streams on', async () => {
    // An offer with H.264 taken out of its video section: rtc_no_codec.
    await page.evaluate(() =>
      (window as unknown as W).rtcTest.start({
        audio: false,
        trickle: false,
        offer: (sdp) => {
          const h264 = [...sdp.matchAll(/a=rtpmap:(\d+) H264\/90000/g)].map((m) => m[1]);
          // As a browser without H.264 offers it: neither its payload types on the m= line nor their attributes.
          return sdp
            .split('\r\n')
            .filter((l) => !h264.some((pt) => l.startsWith(`a=rtpmap:${pt} `) || l.startsWith(`a=fmtp:${pt} `) || l.startsWith(`a=rtcp-fb:${pt} `)))
            .map((l) =>
              l.startsWith('m=video ')
                ? l
                    .split(' ')
                    .filter((f, i) => i < 3 || !h264.includes(f))
                    .join(' ')
                : l,
            )
            .join('\r\n');
        },
      }),
    );
    await expect.poll(() => page.evaluate(() => (window as unknown as W).rtcTest.errors)).toContain('rtc_no_codec');
    const t = (msg: unknown): Promise<void> => page.evaluate((m) => (window as unknown as W).rtcTest.send(m), msg);
    await t({ type: 'rtc_offer', sdp: 'hello' });
    await t({ type: 'rtc_offer', sdp: 'v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n' });
    await t({ type: 'rtc_offer' });
    // An offer cut in half (its video section's payload types without their a=rtpmap lines): rtc_bad_offer, not rtc_no_codec.
    const whole = await page.evaluate(() => (window as unknown as { rtcTest: { pc: RTCPeerConnection } }).rtcTest.pc.localDescription!.sdp);
    expect(whole).toMatch(/a=fingerprint:[^]*a=rtpmap:/);
    await t({ type: 'rtc_offer', sdp: whole.slice(0, whole.indexOf('a=rtpmap:')) });
    await t({ type: 'rtc_candidate', candidate: 'not a candidate' });
    await t({ type: 'rtc_candidate', candidate: 'x'.repeat(2000) });
    await t({ type: 'rtc_close', extra: 1 });
    // Malformed messages are answered at once, signalling in its own order: compare as sets with counts.
    await expect
      .poll(() => page.evaluate(() => [...(window as unknown as W).rtcTest.errors].sort()))
      .toEqual([
        'malformed_message',
        'malformed_message',
        'malformed_message',
        'rtc_bad_candidate',
        'rtc_bad_offer',
        'rtc_bad_offer',
        'rtc_bad_offer',
        'rtc_no_codec',
      ]);
    // The session streams on, over the WebSocket.
    const before = await page.evaluate(() => (window as unknown as W).rtcTest.binaryAfterClose + (window as unknown as W).rtcTest.binaryWhileConnected);
    expect(before).toBe(0);
    await expect.poll(() => server.connections()[0]?.framesSent ?? 0, { timeout: 10_000 }).toBeGreaterThan(10);
    expect(server.connections()[0]?.webrtc).toBeUndefined();
  }, 30_000);
});
