/**
 * Roles and sessions as users meet them (issue 43, points 5-7), through `reactor run --manifest`
 * (the camera sample with `server.auth`, `single_controller: true`, a resume grace and a
 * `recording:` section), tokens of `reactor token` as typed or minted with the server's secret,
 * `@reactor/client` and raw sockets over a proxy that cuts connections:
 * - who may take clips and start or stop recordings: the token's `rec` grant, and control; the
 *   same grants on the HTTP doors (`GET /recordings`, a recording's file, a clip's file), and the
 *   viewer page (Chromium) disabling the buttons its token does not grant;
 * - a leaked resume secret gives no one else's identity;
 * - a late joiner's `--max-session` counts from its arrival and closes that joiner only.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { WebSocket } from 'ws';
import { connect, type ReactorClient, type RecordingInfo } from '@reactor/client';
import { TokenMinter, type TokenRequest } from '@reactor/server';
import { cameraWorkspace, removeDir } from './fixtures/camera-run.js';
import { launchChromium } from './fixtures/chromium.js';
import { CutProxy } from './fixtures/cut-proxy.js';
import { cliSync, runCli, type RunningCli } from './fixtures/reactor-cli.js';

const SECRET = 'an-hmac-secret-for-the-roles-tests-0123456789';
const GRACE_MS = 20_000;
const minter = new TokenMinter({ secret: SECRET });
const mint = (request: TokenRequest = {}): Promise<string> => minter.mint(request);

let dir: string;
let run: RunningCli;
let base: string;
/** A controller (no limit) that stays for the whole file: the session it started runs throughout. */
let anchor: ReactorClient;
let anchorJoinedAt: number;
const clients: ReactorClient[] = [];
const proxies: CutProxy[] = [];
const sockets: WebSocket[] = [];

beforeAll(async () => {
  dir = cameraWorkspace('reactor-roles-', ['port: 0', 'single_controller: true', `resume_grace_ms: ${GRACE_MS}`], {}, [
    'recording:',
    '  dir: rec',
    '  clip_seconds: 10',
    '  min_free_bytes: 0',
  ]);
  run = runCli(dir, { REACTOR_AUTH_SECRET: SECRET });
  base = new URL(await run.url).origin;
  anchor = await join_(await mint());
  anchorJoinedAt = performance.now();
}, 60_000);

afterAll(async () => {
  for (const s of sockets) s.terminate();
  for (const c of clients) c.close();
  for (const p of proxies) await p.close();
  await run?.stop();
  if (dir) removeDir(dir);
});

async function join_(token: string, url = base): Promise<ReactorClient> {
  const c = await connect(url, { token, WebSocket: WebSocket as never, reconnect: false });
  clients.push(c);
  return c;
}

/** Resolves once `c` has received a frame. */
const frame = (c: ReactorClient): Promise<void> => new Promise((r) => c.once('frame', () => r()));

/** Waits until the server's log has a line matching `pattern`. */
async function logged(pattern: RegExp, what: string): Promise<void> {
  await expect.poll(() => pattern.test(run.stderr()), { timeout: 20_000, interval: 25, message: `the server to log ${what}` }).toBe(true);
}

/** The recordings the server lists, with a controller's token. */
async function recordings(): Promise<RecordingInfo[]> {
  const res = await fetch(`${base}/recordings`, { headers: { authorization: `Bearer ${await mint()}`, connection: 'close' } });
  expect(res.status).toBe(200);
  return ((await res.json()) as { recordings: RecordingInfo[] }).recordings;
}

interface RawWelcome {
  type: 'welcome';
  clientId: string;
  role: string;
  resumed?: boolean;
  resume?: { secret: string };
}

/** A raw socket with `?token=` (and `?resume=`): its welcome, and its later messages. */
async function rawJoin(url: string, token: string, resume?: string): Promise<{ ws: WebSocket; welcome: RawWelcome; messages: Array<Record<string, unknown>> }> {
  const q = new URLSearchParams({ token, ...(resume !== undefined && { resume }) });
  const ws = new WebSocket(`${url.replace(/^http/, 'ws')}/ws?${q}`);
  sockets.push(ws);
  const messages: Array<Record<string, unknown>> = [];
  const welcome = await new Promise<RawWelcome>((resolve, reject) => {
    ws.on('message', (data, binary) => {
      if (binary) return;
      const msg = JSON.parse(data.toString()) as Record<string, unknown>;
      messages.push(msg);
      if (msg['type'] === 'welcome') resolve(msg as unknown as RawWelcome);
    });
    ws.once('error', reject);
    ws.once('close', (code) => reject(new Error(`closed with ${code} before the welcome`)));
  });
  return { ws, welcome, messages };
}

/** Sends a command on a raw socket; resolves with its reply or error. */
function rawCommand(
  s: { ws: WebSocket; messages: Array<Record<string, unknown>> },
  id: string,
  name: string,
  params: object,
): Promise<Record<string, unknown>> {
  s.ws.send(JSON.stringify({ type: 'command', id, name, params }));
  return new Promise((resolve) => {
    const look = (): void => {
      const answer = s.messages.find((m) => m['id'] === id && (m['type'] === 'reply' || m['type'] === 'error'));
      if (answer) resolve(answer);
      else setTimeout(look, 10);
    };
    look();
  });
}

describe('clips and recordings are a grant (rec), not every viewer’s', () => {
  it('a spectator may not start, stop or clip; a controller without control may not stop the holder’s recording; a spectator granted --rec clip takes a clip', async () => {
    expect(anchor.control?.controller).toBe(anchor.clientId);
    await frame(anchor);
    const started = await anchor.recording('start');
    expect(started.state).toBe('recording');

    const watcher = await join_(await mint({ role: 'spectator' }));
    expect(watcher.role).toBe('spectator');
    await expect(watcher.recording('stop')).rejects.toMatchObject({ code: 'forbidden_role' });
    await expect(watcher.recording('stop')).rejects.toThrow(/your role "spectator" may not start or stop recordings/);
    await expect(watcher.recording('start')).rejects.toMatchObject({ code: 'forbidden_role' });
    await expect(watcher.clip({ seconds: 1 })).rejects.toMatchObject({ code: 'forbidden_role' });

    // A second controller: it may clip (its default grant) but not stop the recording of the one who steers.
    const other = await join_(await mint());
    await expect(other.recording('stop')).rejects.toMatchObject({ code: 'not_controller' });
    // A controller whose token grants clips only.
    const clipsOnly = await join_(await mint({ recording: ['clip'] }));
    await expect(clipsOnly.recording('stop')).rejects.toMatchObject({ code: 'recording_not_granted' });

    // The recording went on through all of it.
    expect((await recordings()).find((r) => r.name === started.name)?.state).toBe('recording');

    // `reactor token --rec clip` as typed: a spectator that may clip.
    const r = cliSync(['token', '--manifest', join(dir, 'reactor.yaml'), '--role', 'spectator', '--rec', 'clip'], { REACTOR_AUTH_SECRET: SECRET });
    expect(r.status, r.stderr).toBe(0);
    const clipper = await join_(r.stdout.trim());
    const clip = await clipper.clip({ seconds: 1 });
    const file = await fetch(clip.url, { headers: { connection: 'close' } });
    expect(file.status).toBe(200);
    expect(file.headers.get('content-type')).toBe('video/mp4');
    await expect(clipper.recording('stop')).rejects.toMatchObject({ code: 'forbidden_role' });

    const stopped = await anchor.recording('stop');
    expect(stopped).toMatchObject({ name: started.name, state: 'stopped' });
    for (const c of [watcher, other, clipsOnly, clipper]) c.close();

    // The HTTP doors take the same grants: the listing and the files of recordings `record`, a clip's file `clip`.
    const get = async (path: string, token: string): Promise<[number, string | undefined]> => {
      const res = await fetch(new URL(path, base), { headers: { authorization: `Bearer ${token}`, connection: 'close' } });
      const body = res.headers.get('content-type')?.startsWith('application/json')
        ? ((await res.json()) as { error?: { code: string } })
        : (await res.arrayBuffer(), {});
      return [res.status, body.error?.code];
    };
    const spectator = await mint({ role: 'spectator' });
    const clipPath = new URL(clip.url).pathname;
    const recFile = `/recordings/${started.name}`;
    expect(await get('/recordings', spectator)).toEqual([403, 'forbidden_role']);
    expect(await get(recFile, spectator)).toEqual([403, 'forbidden_role']);
    expect(await get(clipPath, spectator)).toEqual([403, 'forbidden_role']);
    expect(await get('/recordings', r.stdout.trim())).toEqual([403, 'forbidden_role']);
    expect(await get(clipPath, r.stdout.trim())).toEqual([200, undefined]);
    const clipsOnlyToken = await mint({ recording: ['clip'] });
    expect(await get('/recordings', clipsOnlyToken)).toEqual([403, 'recording_not_granted']);
    expect(await get(recFile, clipsOnlyToken)).toEqual([403, 'recording_not_granted']);
    expect(await get(clipPath, await mint({ recording: ['record'] }))).toEqual([403, 'recording_not_granted']);
    const controller = await mint();
    expect(await get(recFile, controller)).toEqual([200, undefined]);
    expect(await get(clipPath, controller)).toEqual([200, undefined]);
    expect((await recordings()).map((x) => x.name)).toContain(started.name);
  });

  it('the viewer disables, with a tooltip, the clip and record buttons a token does not grant, and lists no recordings without record', async () => {
    const browser = await launchChromium();
    try {
      const page = async (token: string): Promise<Page> => {
        const p = await browser.newPage();
        await p.goto(`${base}/?token=${encodeURIComponent(token)}`);
        await p.waitForFunction(() => (window as unknown as { reactorViewer: { client?: { clientId: string } } }).reactorViewer.client?.clientId);
        return p;
      };
      const buttons = (p: Page): Promise<Array<[boolean, string]>> =>
        p.$$eval('#clip-button, #record-button', (bs) => bs.map((b) => [(b as HTMLButtonElement).disabled, (b as HTMLElement).title] as [boolean, string]));
      // A spectator: neither; the list says why instead of polling a listing it would be refused.
      const watcher = await page(await mint({ role: 'spectator' }));
      expect(await buttons(watcher)).toEqual([
        [true, 'your token does not grant clips (ask for one minted with reactor token --rec clip)'],
        [true, 'your token does not grant recordings (ask for one minted with reactor token --rec record)'],
      ]);
      expect(await watcher.textContent('#recordings')).toBe('Your token does not grant recordings: none listed.');
      // A spectator granted clips: the clip button only.
      const clipper = await page(await mint({ role: 'spectator', recording: ['clip'] }));
      expect(await buttons(clipper)).toEqual([
        [false, 'an MP4 of the last seconds of the stream'],
        [true, 'your token does not grant recordings (ask for one minted with reactor token --rec record)'],
      ]);
      // A controller: both, and the list is filled from GET /recordings.
      const controller = await page(await mint());
      expect(await buttons(controller)).toEqual([
        [false, 'an MP4 of the last seconds of the stream'],
        [false, 'start or stop recording the session'],
      ]);
      await expect.poll(() => controller.textContent('#recordings'), { timeout: 10_000 }).toMatch(/\.mp4 · /);
    } finally {
      await browser.close();
    }
  });

  it('reactor token refuses a --rec it does not know', () => {
    const r = cliSync(['token', '--manifest', join(dir, 'reactor.yaml'), '--rec', 'clips'], { REACTOR_AUTH_SECRET: SECRET });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('--rec takes clip, record (comma-separated), * or none, got "clips"');
  });
});

describe('a resume secret is bound to its holder', () => {
  it('a spectator token, or another subject’s, with a controller’s leaked secret connects as a new client; the owner still resumes', async () => {
    const proxy = new CutProxy(Number(new URL(base).port));
    proxies.push(proxy);
    const via = `http://127.0.0.1:${await proxy.listen()}`;
    const aliceToken = await mint({ subject: 'alice' });
    const owner = await rawJoin(via, aliceToken);
    expect(owner.welcome.role).toBe('controller');
    const secret = owner.welcome.resume!.secret;
    const id = owner.welcome.clientId;
    proxy.cut();
    await logged(new RegExp(`client ${id} dropped; held`), 'the hold of the dropped client');

    const thief = await rawJoin(base, await mint({ role: 'spectator' }), secret);
    expect(thief.welcome).toMatchObject({ role: 'spectator', resumed: false });
    expect(thief.welcome.clientId).not.toBe(id);
    await logged(
      new RegExp(`a resume of client ${id} was refused: the credential's role "spectator" is not the held client's \\("controller"\\)`),
      'the refusal',
    );
    expect(await rawCommand(thief, 't1', 'set_effect', { effect: 'blur' })).toMatchObject({ type: 'error', code: 'forbidden_role' });

    const bob = await rawJoin(base, await mint({ subject: 'bob' }), secret);
    expect(bob.welcome).toMatchObject({ role: 'controller', resumed: false });
    expect(bob.welcome.clientId).not.toBe(id);

    // The hold was left for its owner.
    const back = await rawJoin(base, aliceToken, secret);
    expect(back.welcome).toMatchObject({ clientId: id, role: 'controller', resumed: true });
    for (const s of [thief, bob, back]) s.ws.close();
  });
});

describe("a token's --max-session is its holder's", () => {
  it("a late joiner's limit counts from its arrival and closes that joiner alone; the session and its other clients go on", async () => {
    const LIMIT_S = 2;
    // The session is older than the joiner's limit before it joins.
    while (performance.now() - anchorJoinedAt < LIMIT_S * 1000 + 500) await frame(anchor);
    const session = anchor.session.sessionId;
    const token = await mint({ maxSessionS: LIMIT_S });
    // Taken before the upgrade is sent: the server's clock for the joiner starts later than this.
    const joinedAt = performance.now();
    const joiner = await join_(token);
    expect(joiner.session.sessionId).toBe(session);
    const reason = await new Promise<string>((r) => joiner.on('status', (s) => s.state === 'closed' && r(s.reason ?? '')));
    const heldFor = performance.now() - joinedAt;
    expect(reason).toMatch(/^session_time_limit: your token allows 2 s in a session \(mst\), from your arrival/);
    // Not before its own time has run (the lower bound holds however busy the machine is).
    expect(heldFor).toBeGreaterThanOrEqual(LIMIT_S * 1000);
    // The anchor is still connected, in the same session, and frames keep coming.
    await frame(anchor);
    expect(anchor.connectionState).toBe('open');
    expect(anchor.session.sessionId).toBe(session);
  });
});
