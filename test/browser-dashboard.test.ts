/**
 * The live dashboard in Chromium (issue 26), through the doors a user takes: `reactor run
 * --manifest` of the sample app as a child process prints the dashboard's URL, Debian's Chromium
 * opens it; a Node client watches the stream meanwhile. The charts of the metrics that exist draw
 * (their canvases hold pixels of the series' colours, and their series have points), a chart whose
 * metric the server lacks says "no data yet", an error answer shows in the recent errors, and a
 * missing or wrong token is refused as for /metrics.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import type { Browser, Page } from 'playwright-core';
import { connect, type ReactorClient } from '@reactor/client';
import { launchWithFakeMedia } from './fixtures/chromium.js';
import { sampleWorkspace } from './fixtures/sample-workspace.js';

const repo = resolve(import.meta.dirname, '..');
const cli = join(repo, 'packages/cli/dist/main.js');
const artifacts = join(repo, 'test-artifacts');
const TOKEN = 'dashboard-test-token-0123456789';
/** The charts whose metrics every server has today; the others may say "no data yet". */
const ALWAYS = ['fps', 'step', 'delivery', 'clients'];
/** The page's series colours (`dashboard.ts`), as RGB. */
const SERIES_RGB = [
  [0x6a, 0xa6, 0xff],
  [0x52, 0xc9, 0x8a],
  [0xe6, 0xb4, 0x50],
  [0xff, 0x6b, 0x6b],
];

let dir: string;
let child: ChildProcess;
let browser: Browser;
let client: ReactorClient;
let viewerUrl: URL;
let dashboardUrl: URL;
let stderr = '';

beforeAll(async () => {
  dir = sampleWorkspace({
    prefix: 'reactor-dashboard-',
    name: 'dashboard-test',
    config: 'width: 128\nheight: 96\nframesPerChunk: 4\nworldSize: 1\ndevices: cpu\nbackend: wasm\n',
    server: '{ port: 0, encoding: jpeg }',
  });
  child = spawn(process.execPath, [cli, 'run', '--manifest', join(dir, 'reactor.yaml'), '--token', TOKEN], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  [viewerUrl, dashboardUrl] = await new Promise<[URL, URL]>((res, rej) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const v = /Viewer: (\S+)/.exec(out);
      const m = /Dashboard: (\S+)/.exec(out);
      if (v && m) res([new URL(v[1]!), new URL(m[1]!)]);
    });
    child.once('exit', (code) => rej(new Error(`reactor run exited with ${code} before printing the dashboard URL:\n${stderr}`)));
  });
  client = await connect(viewerUrl.origin, { WebSocket, token: TOKEN, reconnect: false });
  browser = await launchWithFakeMedia();
}, 90_000);

afterAll(async () => {
  client?.close();
  await browser?.close();
  if (child && child.exitCode === null && child.signalCode === null) {
    const gone = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    await Promise.race([gone, new Promise((r) => setTimeout(r, 10_000))]);
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

type Charts = Record<string, { series: string[]; points: number }>;
const charts = (p: Page): Promise<Charts> => p.evaluate(() => (window as unknown as { reactorDashboard: { charts(): Charts } }).reactorDashboard.charts());

/** Pixels of a chart's canvas near one of the series colours (the axes and grid are other colours; the background is transparent). */
function seriesPixels(p: Page, id: string): Promise<{ width: number; height: number; painted: number; series: number }> {
  return p.evaluate(
    ([chart, rgb]) => {
      const canvas = document.querySelector<HTMLCanvasElement>(`#chart-${chart} canvas`);
      if (!canvas) return { width: 0, height: 0, painted: 0, series: 0 };
      const d = canvas.getContext('2d')!.getImageData(0, 0, canvas.width, canvas.height).data;
      let painted = 0;
      let series = 0;
      for (let i = 0; i < d.length; i += 4) {
        if (d[i + 3]! === 0) continue;
        painted++;
        if (rgb.some(([r, g, b]) => Math.abs(d[i]! - r!) + Math.abs(d[i + 1]! - g!) + Math.abs(d[i + 2]! - b!) < 60 && d[i + 3]! > 128)) series++;
      }
      return { width: canvas.width, height: canvas.height, painted, series };
    },
    [id, SERIES_RGB] as const,
  );
}

describe('the live dashboard in Chromium (reactor run of the sample app)', () => {
  it('reactor run prints the dashboard URL; the page draws fps, step time, delivery and clients, and says "no data yet" for metrics the server lacks', async () => {
    expect(dashboardUrl.pathname).toBe('/dashboard');
    expect(dashboardUrl.searchParams.get('token')).toBe(TOKEN);
    const page = await browser.newPage({ viewport: { width: 1400, height: 1600 } });
    const problems: string[] = [];
    page.on('pageerror', (e) => problems.push(e.message));
    page.on('console', (m) => m.type() === 'error' && problems.push(m.text()));
    try {
      const res = await page.goto(dashboardUrl.href);
      expect(res?.status()).toBe(200);
      // A few seconds of samples: each of these charts has at least 3 points.
      await expect
        .poll(
          async () => {
            const c = await charts(page);
            return ALWAYS.every((id) => (c[id]?.points ?? 0) >= 3);
          },
          { timeout: 30_000, interval: 500 },
        )
        .toBe(true);
      const c = await charts(page);
      expect(c['fps']!.series).toContain('fps/main_video');
      expect(c['step']!.series).toEqual(['step/mean', 'step/p99']);
      expect(c['clients']!.series).toEqual(['clients/connected']);
      mkdirSync(artifacts, { recursive: true });
      await page.screenshot({ path: join(artifacts, 'dashboard.png'), fullPage: true });
      for (const id of ALWAYS) {
        const px = await seriesPixels(page, id);
        expect(px.width, id).toBeGreaterThan(200);
        expect(px.painted, id).toBeGreaterThan(0);
        // A drawn line of at least a few dozen pixels in a series colour.
        expect(px.series, id).toBeGreaterThan(40);
        expect(await page.isHidden(`#nodata-${id}`), id).toBe(true);
      }
      const data = (await (await fetch(new URL(`/dashboard/data?token=${TOKEN}`, dashboardUrl))).json()) as { absent: string[] };
      const specs = await page.evaluate(
        () => (JSON.parse(document.getElementById('dashboard-config')!.textContent!) as { charts: { id: string; metric: string }[] }).charts,
      );
      expect(specs.map((s) => s.id)).toEqual(expect.arrayContaining([...ALWAYS, 'c2p', 'stage', 'gpu', 'viewer']));
      for (const spec of specs) {
        if (c[spec.id]) continue;
        // Not drawn: its card says so, and names the metric when the server has none of that name.
        expect(await page.isVisible(`#nodata-${spec.id}`), spec.id).toBe(true);
        const text = await page.textContent(`#nodata-${spec.id}`);
        expect(text).toBe(data.absent.includes(spec.metric) ? `no data yet (this server has no ${spec.metric})` : 'no data yet');
        expect((await seriesPixels(page, spec.id)).width, spec.id).toBe(0);
      }
      // Live: a second later the page has polled again and the charts have more points.
      const before = (await charts(page))['fps']!.points;
      await expect.poll(async () => (await charts(page))['fps']!.points, { timeout: 10_000 }).toBeGreaterThan(before);
      expect(await page.textContent('#tile-clients')).toBe('1');
      expect(await page.textContent('#session')).toMatch(/^session: streaming · 1 client$/);
      expect(await page.textContent('#poll')).toBe('live');
      expect(await page.textContent('#clients tbody')).toContain(client.clientId);
      expect(await page.textContent('#clients tbody')).toContain('websocket');
      expect(problems).toEqual([]);
    } finally {
      await page.close();
    }
  }, 60_000);

  it('shows an error answer the server sent in its recent errors', async () => {
    await expect(client.send('no_such_command', {})).rejects.toThrow();
    const page = await browser.newPage({ viewport: { width: 1400, height: 1600 } });
    try {
      await page.goto(dashboardUrl.href);
      await expect.poll(() => page.textContent('#events tbody'), { timeout: 15_000 }).toContain('unknown_command');
      expect(await page.textContent('#events tbody')).toMatch(/warnclientsunknown_commanderror answer sent to clients1/);
    } finally {
      await page.close();
    }
  }, 30_000);

  it('refuses the page and its data without the token or with a wrong one, as /metrics', async () => {
    const page = await browser.newPage();
    try {
      for (const path of ['/dashboard', '/dashboard/data', '/metrics']) {
        for (const query of ['', '?token=wrong']) {
          const res = await page.goto(new URL(path + query, dashboardUrl.origin).href);
          expect(res?.status(), path + query).toBe(401);
          expect(((await res!.json()) as { error: { code: string } }).error.code).toBe('unauthorized');
        }
      }
    } finally {
      await page.close();
    }
  }, 30_000);
});
