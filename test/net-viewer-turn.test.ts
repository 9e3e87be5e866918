/**
 * The viewer page reaches the server through the TURN server of reactor.yaml (`server.webrtc`),
 * with nothing of its own: `reactor run --manifest` (the moving pattern of
 * scripts/net/pattern-app.mjs, 320x180 H.264) in the link's server namespace, a real coturn
 * there too, started with `use-auth-secret` (scripts/net/coturn.mjs), and the viewer in
 * Chromium in the viewer namespace with `?transport=`.
 * - `ice_servers` names coturn without credentials, `REACTOR_WEBRTC_TURN_SECRET` is coturn's
 *   secret, `ice_transport_policy: relay`: the welcome carries the TURN server with a credential
 *   minted for this client, the page plays over WebRTC and its selected pair is relay on both ends;
 *   the badge names the path: TURN over UDP, or TURN over TCP when `client_ice_servers` gives
 *   the page coturn's TCP listener;
 * - a wrong `turn_secret`: coturn refuses (401), the viewer falls back to the WebSocket by itself,
 *   says why (the server's `rtc_ice_timeout` and the browser's 401), keeps drawing, and the server
 *   holds no peer connection afterwards.
 * Needs root (`ip netns`) and coturn (Debian `coturn`); CI runs as root. Skipped, with the reason
 * printed, only off Linux or without root.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type Browser, type Page } from 'playwright-core';
import { createImpairedLink, type ImpairedLink } from '../scripts/net/impaired-link.mjs';
import { startCoturn, type Coturn } from '../scripts/net/coturn.mjs';
import { chromiumOnLink, measure, serveOnLink, startMeter } from '../scripts/net/playback.mjs';

const unavailable = process.platform !== 'linux' || process.getuid?.() !== 0 ? 'needs root on Linux (ip netns); CI runs as root' : undefined;
if (unavailable) console.warn(`viewer TURN test skipped: ${unavailable}`);

const SECRET = 'coturn-shared-secret-for-tests';
const SMALL = { REACTOR_PATTERN_WIDTH: '320', REACTOR_PATTERN_HEIGHT: '180' };

type ViewerWindow = Window & {
  reactorViewer: {
    framesDrawn: number;
    client?: {
      clientId: string;
      webrtcSetup?: { iceServers: { urls: string | string[]; username?: string; credential?: string }[]; iceTransportPolicy: string };
    };
    transport: { current: string; reason?: string; stats?: { candidates?: { local: string; remote: string; protocol?: string } } };
  };
};

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});
let link: ImpairedLink;
let turn: Coturn;
let browser: Browser | undefined;

describe.skipIf(unavailable !== undefined)('the viewer through the TURN server of reactor.yaml', () => {
  beforeAll(async () => {
    link = await createImpairedLink({ rttMs: 20 });
    turn = await startCoturn({ ip: link.server.ip, authSecret: SECRET, spawn: (cmd, args, o) => link.spawn('server', cmd, args, o) });
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
    await turn?.stop();
    await link?.close();
  });

  /** `reactor run --manifest` with `webrtc` as written, and the viewer page with `?transport=`. */
  async function viewer(webrtc: string, transport: string, env: Record<string, string> = {}): Promise<Page> {
    const server = await serveOnLink(link, { serverYaml: ['video: { codec: h264, key_frame_interval: 30 }', `webrtc: ${webrtc}`], env: { ...SMALL, ...env } });
    cleanups.push(() => server.stop());
    const url = new URL(server.url);
    browser ??= await chromium.launch(chromiumOnLink(link, url.origin, ['--autoplay-policy=no-user-gesture-required']));
    const context = await browser.newContext();
    cleanups.push(() => context.close());
    const page = await context.newPage();
    url.searchParams.set('transport', transport);
    await page.goto(url.href);
    return page;
  }

  it('plays over WebRTC relayed by coturn on both ends, with a credential minted for this client in the welcome', async () => {
    const page = await viewer(`{ ice_servers: [{ urls: "${turn.urls}" }], ice_transport_policy: relay }`, 'webrtc', { REACTOR_WEBRTC_TURN_SECRET: SECRET });
    await page.waitForFunction(() => (window as unknown as ViewerWindow).reactorViewer.transport?.current === 'webrtc', null, { timeout: 20_000 });
    const welcome = await page.evaluate(() => {
      const c = (window as unknown as ViewerWindow).reactorViewer.client!;
      return { clientId: c.clientId, setup: c.webrtcSetup };
    });
    expect(welcome.setup?.iceTransportPolicy).toBe('relay');
    expect(welcome.setup?.iceServers).toHaveLength(1);
    const ice = welcome.setup!.iceServers[0]!;
    expect(ice.urls).toBe(turn.urls);
    // TURN REST API: `<expiry>:<clientId>`, a day ahead by default.
    const [expiry, id] = ice.username!.split(':');
    expect(id).toBe(welcome.clientId);
    expect(Number(expiry) - Date.now() / 1000).toBeGreaterThan(86_400 - 120);
    expect(ice.credential).toMatch(/^[A-Za-z0-9+/]{27}=$/);
    expect(ice.credential).not.toContain(SECRET);

    await page.waitForFunction(() => (window as unknown as ViewerWindow).reactorViewer.transport.stats?.candidates !== undefined, null, { timeout: 10_000 });
    // Relayed on both ends; the pair's transport protocol rides along (the badge names the path: TURN).
    expect(await page.evaluate(() => (window as unknown as ViewerWindow).reactorViewer.transport.stats!.candidates)).toEqual({
      local: 'relay',
      remote: 'relay',
      protocol: 'udp',
    });
    expect(await page.textContent('#rtc-stats')).toMatch(/ · relay\/relay$/);
    // The badge names the path: relayed, so TURN (issue 43 point 12), not UDP.
    expect(await page.getAttribute('#transport', 'title')).toBe('media over WebRTC (TURN over UDP)');
    await startMeter(page);
    const m = await measure(page, 2000);
    expect(m.source).toBe('video');
    expect(m.frames).toBeGreaterThan(10);
  }, 60_000);

  it('names the path TURN over TCP when the page reaches coturn over TCP (client_ice_servers)', async () => {
    // The server relays through coturn over UDP as before; the page is told the TCP listener.
    const page = await viewer(
      `{ ice_servers: [{ urls: "${turn.urls}" }], client_ice_servers: [{ urls: "${turn.urlsTcp}" }], ice_transport_policy: relay }`,
      'webrtc',
      {
        REACTOR_WEBRTC_TURN_SECRET: SECRET,
      },
    );
    await page.waitForFunction(() => (window as unknown as ViewerWindow).reactorViewer.transport?.current === 'webrtc', null, { timeout: 20_000 });
    await page.waitForFunction(() => (window as unknown as ViewerWindow).reactorViewer.transport.stats?.candidates !== undefined, null, { timeout: 10_000 });
    // This side's relay candidate: allocated over TCP (the candidate's relayProtocol).
    expect(await page.evaluate(() => (window as unknown as ViewerWindow).reactorViewer.transport.stats!.candidates)).toMatchObject({
      local: 'relay',
      protocol: 'tcp',
    });
    expect(await page.getAttribute('#transport', 'title')).toBe('media over WebRTC (TURN over TCP)');
    await page.waitForFunction(() => (window as unknown as ViewerWindow).reactorViewer.framesDrawn > 10, null, { timeout: 10_000 });
  }, 60_000);

  it('falls back to the WebSocket when coturn refuses the credential, says why, and keeps no peer connection', async () => {
    const page = await viewer(
      `{ ice_servers: [{ urls: "${turn.urls}" }], turn_secret: not-the-secret, ice_transport_policy: relay, connect_timeout_ms: 2000 }`,
      'auto',
    );
    await page.waitForFunction(() => (window as unknown as ViewerWindow).reactorViewer.transport?.reason !== undefined, null, { timeout: 20_000 });
    const t = await page.evaluate(() => (window as unknown as ViewerWindow).reactorViewer.transport);
    expect(t.current).toBe('websocket');
    // The server's reason, and what the browser's ICE heard from coturn.
    expect(t.reason).toMatch(/rtc_ice_timeout: ICE and DTLS did not connect within 2000 ms/);
    expect(t.reason).toContain(`this side's ICE: ${turn.urls} answered 401`);
    expect(await page.textContent('#transport')).toBe('websocket (WebRTC failed)');
    await startMeter(page);
    const m = await measure(page, 2000);
    expect(m.source).toBe('canvas');
    expect(m.frames).toBeGreaterThan(5);
    const metrics = await page.evaluate(() => fetch('/metrics').then((r) => r.text()));
    expect(metrics).toMatch(/^reactor_webrtc_peers 0$/m);
  }, 60_000);
});
