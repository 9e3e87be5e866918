/**
 * Resume after a drop, through the real server (`reactor run --manifest`, the camera sample) and
 * a TCP proxy in this process that cuts the connection mid-stream without a close frame: within
 * `resume_grace_ms` the client keeps its identity (its camera publication holds, the state and
 * frames come back); after it, it is told it has a new identity. Also, over the wire: single-
 * controller hand-over (`single_controller: true`) and the limits (a token's `--max-session`,
 * which closes its client, and `idle_timeout_ms`, which ends the session), each with its reason in the close.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { connect, type ReactorClient, type ResumeEvent } from '@reactor/client';
import { cameraWorkspace, removeDir } from './fixtures/camera-run.js';
import { CutProxy } from './fixtures/cut-proxy.js';
import { cliSync, runCli, type RunningCli } from './fixtures/reactor-cli.js';
import { until } from '@reactor/test-kit';

const SECRET = 'an-hmac-secret-for-the-resume-tests-0123456789';
const GRACE_MS = 2000;

/** Camera frames (RGB, 64x48) at about 20 fps until aborted. */
async function* camera(signal: AbortSignal): AsyncGenerator<{ rgb: Uint8Array; width: number; height: number }> {
  let n = 0;
  while (!signal.aborted) {
    yield { rgb: new Uint8Array(64 * 48 * 3).fill(n++ % 250), width: 64, height: 48 };
    await new Promise((r) => setTimeout(r, 50));
  }
}

let dir: string;
let run: RunningCli;
let port: number;
const stop = new AbortController();
const clients: ReactorClient[] = [];
const proxies: CutProxy[] = [];

beforeAll(async () => {
  dir = cameraWorkspace('reactor-resume-', ['port: 0', `resume_grace_ms: ${GRACE_MS}`, 'single_controller: true']);
  run = runCli(dir, { REACTOR_AUTH_SECRET: SECRET });
  port = Number(new URL(await run.url).port);
}, 60_000);

afterAll(async () => {
  stop.abort();
  for (const c of clients) c.close();
  for (const p of proxies) await p.close();
  await run?.stop();
  if (dir) removeDir(dir);
});

const token = (args: string[] = []): string => {
  const r = cliSync(['token', '--manifest', join(dir, 'reactor.yaml'), ...args], { REACTOR_AUTH_SECRET: SECRET });
  expect(r.status, r.stderr).toBe(0);
  return r.stdout.trim();
};

async function viaProxy(): Promise<{ proxy: CutProxy; url: string }> {
  const proxy = new CutProxy(port);
  proxies.push(proxy);
  return { proxy, url: `http://127.0.0.1:${await proxy.listen()}` };
}

const metric = async (name: string): Promise<string> => {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`, { headers: { authorization: `Bearer ${token()}`, connection: 'close' } })).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith(name))
    .join('\n');
};

describe('resume through a proxy that cuts the connection', () => {
  it('within the grace: same identity, the camera publication holds, the state and frames come back', async () => {
    const { proxy, url } = await viaProxy();
    const c = await connect(url, { token: token(), WebSocket: WebSocket as never, reconnect: { initialDelayMs: 50, maxDelayMs: 200 } });
    clients.push(c);
    const pub = await c.publish('webcam', camera(stop.signal));
    await c.send('set_effect', { effect: 'edges' });
    await until(() => pub.framesSent > 5, 'camera frames to flow', 15_000);
    let frames = 0;
    c.on('frame', () => frames++);
    await until(() => frames > 3, 'frames before the cut', 15_000);
    const resumed = new Promise<ResumeEvent>((r) => c.once('resumed', r));
    const reconnecting = new Promise((r) => c.once('reconnecting', r));
    const states: unknown[] = [];
    c.on('state', (s) => states.push(s));
    const id = c.clientId;
    proxy.cut();
    await reconnecting;
    const ev = await resumed;
    expect(ev).toMatchObject({ clientId: id, previousClientId: id });
    expect(ev.downMs).toBeLessThan(GRACE_MS);
    expect(c.clientId).toBe(id);
    expect(states.at(-1)).toMatchObject({ effect: 'edges' });
    expect(pub.active).toBe(true);
    const sentAtResume = pub.framesSent;
    frames = 0;
    await until(() => frames > 3 && pub.framesSent > sentAtResume + 3, 'frames and camera frames after the resume', 15_000);
    expect(pub.lastError).toBeUndefined();
    // The server still holds the track for this identity: another client is refused it, naming it.
    const other = await connect(`http://127.0.0.1:${port}`, { token: token(), WebSocket: WebSocket as never });
    clients.push(other);
    await expect(other.publish('webcam', camera(stop.signal))).rejects.toThrow(`client ${id} publishes it`);
    other.close();
    expect(await metric('reactor_resumes_total')).toContain('reactor_resumes_total{result="resumed"} 1');
    c.close();
  });

  it('after the grace: a new identity, and the client says so', async () => {
    const { proxy, url } = await viaProxy();
    const c = await connect(url, { token: token(), WebSocket: WebSocket as never, reconnect: { initialDelayMs: 100, maxDelayMs: 300 } });
    clients.push(c);
    const pub = await c.publish('webcam', camera(stop.signal));
    const id = c.clientId;
    const fresh = new Promise<ResumeEvent>((r) => c.once('new_identity', r));
    let resumedToo = false;
    c.on('resumed', () => (resumedToo = true));
    proxy.refusing = true;
    proxy.cut();
    // The server lets the held client go when its grace ends (on a busy machine, later than
    // GRACE_MS after the cut): only then may the client get through again.
    await until(() => run.stderr().includes(`client ${id} did not come back within ${GRACE_MS} ms`), 'the server to let the held client go', 30_000);
    proxy.refusing = false;
    const ev = await fresh;
    expect(ev.previousClientId).toBe(id);
    expect(ev.clientId).not.toBe(id);
    expect(ev.downMs).toBeGreaterThan(GRACE_MS);
    expect(resumedToo).toBe(false);
    expect(await pub.ended).toEqual({ reason: 'connection_lost' });
    c.close();
  });
});

describe('single-controller mode over the wire', () => {
  it('the first controller steers; another asks, the holder releases, control passes', async () => {
    const a = await connect(`http://127.0.0.1:${port}`, { token: token(), WebSocket: WebSocket as never });
    const b = await connect(`http://127.0.0.1:${port}`, { token: token(), WebSocket: WebSocket as never });
    clients.push(a, b);
    await until(
      () => a.control?.controller === a.clientId,
      `a to hold control (a ${a.clientId}, b ${b.clientId}, control ${JSON.stringify(a.control)})`,
      15_000,
    );
    await expect(b.send('set_effect', { effect: 'blur' })).rejects.toMatchObject({ code: 'not_controller' });
    expect(await b.requestControl()).toEqual({ controller: false, position: 1 });
    const passed = new Promise((r) => b.on('control', (s) => s.controller === b.clientId && r(s)));
    await a.releaseControl();
    await passed;
    await b.send('set_effect', { effect: 'blur' });
    await expect(a.send('set_effect', { effect: 'none' })).rejects.toMatchObject({ code: 'not_controller' });
    a.close();
    b.close();
  });
});

describe('session limits', () => {
  it("a token's --max-session closes its client with session_time_limit; idle_timeout_ms ends the session with idle_timeout; the client does not reconnect", async () => {
    const limits = cameraWorkspace('reactor-limits-', ['port: 0', 'idle_timeout_ms: 1500']);
    const server = runCli(limits, { REACTOR_AUTH_SECRET: SECRET });
    try {
      const base = new URL(await server.url).origin;
      const mint = (args: string[]) => {
        const r = cliSync(['token', '--manifest', join(limits, 'reactor.yaml'), ...args], { REACTOR_AUTH_SECRET: SECRET });
        expect(r.status, r.stderr).toBe(0);
        return r.stdout.trim();
      };
      const shortToken = mint(['--max-session', '1s']);
      // Taken before the upgrade is sent: the server's clock for this client starts later than this.
      const started = performance.now();
      const short = await connect(base, { token: shortToken, WebSocket: WebSocket as never });
      const closed = new Promise<string>((r) => short.on('status', (s) => s.state === 'closed' && r(s.reason ?? '')));
      // Busy (not idle): the time limit ends it.
      const busy = setInterval(() => short.send('set_strength', { strength: Math.random() }).catch(() => undefined), 200);
      const reason = await closed;
      clearInterval(busy);
      expect(reason).toMatch(/^session_time_limit: your token allows 1 s in a session \(mst\), from your arrival/);
      // Not before the token's time has run (the reason says which limit fired).
      expect(performance.now() - started).toBeGreaterThanOrEqual(1000);
      expect(short.connectionState).toBe('closed');
      const idle = await connect(base, { token: mint([]), WebSocket: WebSocket as never });
      const idleReason = await new Promise<string>((r) => idle.on('status', (s) => s.state === 'closed' && r(s.reason ?? '')));
      expect(idleReason).toMatch(/^idle_timeout: no command, publication or frame for 1.5 s/);
      expect(idle.connectionState).toBe('closed');
    } finally {
      await server.stop();
      removeDir(limits);
    }
  });
});
