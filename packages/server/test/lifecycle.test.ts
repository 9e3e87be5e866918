import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { createRequire } from 'node:module';
import { beforeAll, describe, expect, it } from 'vitest';
import 'reflect-metadata';
import { InputState, Output, ReactorApp, reactorApp } from '@reactor/runtime';
import { serve, type ReactorServer } from '../src/index.js';
import { gatedApp } from './fixtures/gated-app.js';
import { patternApp } from './fixtures/pattern-app.js';
import { until } from '@reactor/test-kit';
import { RawClient } from './fixtures/net.js';
import { quiet, useCleanups } from './fixtures/cleanups.js';

const cleanups = useCleanups();

/** Status and JSON body of a GET. */
async function probe(url: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(url);
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** The value of one sample line of /metrics (NaN when absent). */
async function metric(server: ReactorServer, sample: string): Promise<number> {
  const headers: Record<string, string> = server.options.token ? { authorization: `bearer ${server.options.token}` } : {};
  const text = await (await fetch(`${server.url}/metrics`, { headers })).text();
  const line = text.split('\n').find((l) => l.startsWith(`${sample} `));
  return line === undefined ? NaN : Number(line.slice(sample.length + 1));
}

/** What the reporting app's `readiness()` says: `true`, or why it cannot take users. */
let appReport: true | string = true;

/** An app that reports its own readiness, as the sample app does for its runner. */
@reactorApp({ name: 'reporting' })
class ReportingApp extends ReactorApp<InputState, InputState, Output | null> {
  generate(): null {
    return null;
  }
  override readiness(): true | string {
    return appReport;
  }
}

describe('server: liveness and readiness', () => {
  it('/health/live is 200 while the process serves; /health/ready and /health follow readiness(): 503 with the reasons while loading, 200 once ready', async () => {
    let open!: () => void;
    const server = await serve(gatedApp(new Promise<void>((r) => (open = r))), { port: 0, logger: quiet, token: 'secret-token' });
    cleanups.push(
      () => server.close(),
      () => open(),
    );
    // Open without the token (probes carry none), like /health.
    expect(await probe(`${server.url}/health/live`)).toEqual({ status: 200, body: { status: 'live' } });
    const loading = await probe(`${server.url}/health/ready`);
    expect(loading).toEqual({
      status: 503,
      body: {
        ready: false,
        reasons: [{ code: 'loading', message: 'the app is loading' }],
        error: { code: 'not_ready', message: 'not ready: the app is loading' },
      },
    });
    expect(await probe(`${server.url}/health`)).toMatchObject({ status: 503, body: { status: 'loading', ready: false, reasons: [{ code: 'loading' }] } });
    expect(await metric(server, 'reactor_ready')).toBe(0);
    expect(await metric(server, 'reactor_not_ready{reason="loading"}')).toBe(1);
    open();
    await server.loaded;
    expect(await probe(`${server.url}/health/ready`)).toEqual({ status: 200, body: { ready: true, reasons: [] } });
    expect(await metric(server, 'reactor_ready')).toBe(1);
    expect(await metric(server, 'reactor_not_ready{reason="loading"}')).toBeNaN();
  });

  it('/health/ready is 503 with load_failed when load() threw, while /health/live stays 200', async () => {
    const server = await serve(gatedApp(Promise.resolve(), 'no weights'), { port: 0, logger: quiet });
    cleanups.push(() => server.close());
    await expect(server.loaded).rejects.toThrow();
    expect(await probe(`${server.url}/health/ready`)).toMatchObject({
      status: 503,
      body: { ready: false, reasons: [{ code: 'load_failed', message: expect.stringContaining('no weights') }] },
    });
    expect((await fetch(`${server.url}/health/live`)).status).toBe(200);
    expect(await metric(server, 'reactor_not_ready{reason="load_failed"}')).toBe(1);
  });

  it('a loaded app that reports itself not ready makes /health/ready 503 with its reason, and 200 again once it recovers', async () => {
    appReport = true;
    const server = await serve(ReportingApp, { port: 0, logger: quiet, gracePeriodMs: 0 });
    cleanups.push(
      () => server.close(),
      () => (appReport = true),
    );
    await server.loaded;
    expect((await fetch(`${server.url}/health/ready`)).status).toBe(200);
    appReport = 'rank 1 exited (code 7); restarting the runner';
    expect(await probe(`${server.url}/health/ready`)).toMatchObject({
      status: 503,
      body: { ready: false, reasons: [{ code: 'app_not_ready', message: 'rank 1 exited (code 7); restarting the runner' }] },
    });
    expect(await probe(`${server.url}/health`)).toMatchObject({ status: 503, body: { status: 'not_ready', ready: false, session: 'ready' } });
    expect(await metric(server, 'reactor_ready')).toBe(0);
    expect(await metric(server, 'reactor_not_ready{reason="app_not_ready"}')).toBe(1);
    appReport = true;
    expect((await fetch(`${server.url}/health/ready`)).status).toBe(200);
    expect(await metric(server, 'reactor_not_ready{reason="app_not_ready"}')).toBeNaN();
  });
});

describe('server: /health', () => {
  it('reports loading (503), then ready (200)', async () => {
    let open!: () => void;
    const server = await serve(gatedApp(new Promise<void>((r) => (open = r))), { port: 0, logger: quiet });
    cleanups.push(() => server.close());
    const loading = await fetch(`${server.url}/health`);
    expect(loading.status).toBe(503);
    expect(await loading.json()).toMatchObject({ status: 'loading' });
    open();
    await server.loaded;
    const ready = await fetch(`${server.url}/health`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: 'ready', ready: true, reasons: [], session: 'ready', clients: 0 });
  });

  it('reports failed (503) with the reason when load() throws, and keeps serving the reason', async () => {
    const server = await serve(gatedApp(Promise.resolve(), 'weights missing in /nowhere'), { port: 0, logger: quiet });
    cleanups.push(() => server.close());
    await expect(server.loaded).rejects.toThrow(/weights missing/);
    const res = await fetch(`${server.url}/health`);
    expect(res.status).toBe(503);
    expect(await res.json()).toMatchObject({ status: 'failed', reason: expect.stringContaining('weights missing in /nowhere') });
    const c = await new RawClient(server.wsUrl).open();
    expect(c.texts[0]).toMatchObject({ type: 'welcome', session: { state: 'failed' } });
    c.close();
  });
});

describe('server: shutdown', () => {
  it('close() sends every client a close frame (1001), ends the session and stops listening', async () => {
    let ended = 0;
    const server: ReactorServer = await serve(patternApp({ onSessionEnded: () => ended++ }), { port: 0, gracePeriodMs: 60_000, logger: quiet });
    await server.loaded;
    const a = await new RawClient(server.wsUrl).open();
    const b = await new RawClient(server.wsUrl).open();
    await until(() => a.binaries.length > 0, 'frames', 5000);
    await server.close();
    expect(await a.closed).toBe(1001);
    expect(await b.closed).toBe(1001);
    expect(ended).toBe(1);
    await expect(fetch(`${server.url}/health`)).rejects.toThrow();
  });

  const fixtures = fileURLToPath(new URL('./fixtures/', import.meta.url));
  beforeAll(async () => {
    // Child processes run compiled JavaScript: build the fixture app once.
    await promisify(execFile)(process.execPath, [createRequire(import.meta.url).resolve('typescript/bin/tsc'), '-p', `${fixtures}tsconfig.build.json`]);
  }, 60_000);

  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
    it(`on ${signal} the process closes clients (1001), shuts the app down and exits 0`, async () => {
      const child: ChildProcess = spawn(process.execPath, [`${fixtures}dist/serve-pattern.js`], { stdio: ['ignore', 'pipe', 'pipe'] });
      cleanups.push(() => child.exitCode === null && child.kill('SIGKILL'));
      let out = '';
      child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
      await until(() => out.includes('"url"'), 'the child to listen', 15_000);
      const url = (JSON.parse(out.split('\n').find((l) => l.includes('"url"'))!) as { url: string }).url;
      const c = await new RawClient(`${url.replace('http', 'ws')}/ws`).open();
      await until(() => c.binaries.length > 2, 'frames', 5000);
      const exited = once(child, 'exit');
      child.kill(signal);
      expect(await c.closed).toBe(1001);
      const [code, sig] = (await exited) as [number | null, string | null];
      expect({ code, sig }).toEqual({ code: 0, sig: null });
      expect(out).toContain(`signal ${signal}`);
      expect(out).toContain('runner-shutdown');
    }, 30_000);
  }
});
