/**
 * Issue 26's "where the time goes" and "progress while loading", through `reactor run --manifest`
 * as a user types it, with two Python ranks (test/fixtures/stages): the app's load reports
 * "downloading weights" at 63 % and waits, the ranks report their own stages; while it loads
 * `/health/ready`, the session status, `reactor_load_progress_ratio` and the viewer in Chromium say
 * how far it is; piped, `reactor run` prints plain progress lines, and in a pseudo-terminal
 * (`script`) a progress bar redrawn in place. Once it streams, every stage of
 * `reactor_step_stage_seconds` has observations and `reactor_rank_gpu_busy_ratio` has the rank
 * that knows its GPU busy ratio, and not the one that does not.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { connect } from '@reactor/client';
import { launchWithFakeMedia } from './fixtures/chromium.js';
import { untilValue } from '@reactor/test-kit';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(repo, 'packages/cli/dist/main.js');
const fixtures = join(repo, 'test/fixtures/stages');
const PY = process.env.REACTOR_PYTHON ?? '/usr/bin/python3';
const STAGES = ['process_input', 'generate', 'runner_dispatch', 'runner_ranks', 'runner_handback', 'process_output', 'encode', 'queue', 'send'];

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function workspace(): string {
  const dir = mkdtempSync(join(tmpdir(), 'reactor-stages-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(
    join(dir, 'reactor.yaml'),
    [
      'runtime:',
      `  import: ${join(fixtures, 'progress-app.mjs')}:ProgressApp`,
      '  python:',
      `    interpreter: ${PY}`,
      `    path: [${fixtures}]`,
      '    worker: progress_worker:ProgressWorker',
      'server: { port: 0 }',
      '',
    ].join('\n'),
  );
  return dir;
}

/** Ends `child` (and, with `group`, its process group) with SIGTERM and resolves its exit code. */
function stop(child: ChildProcess, group = false): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  if (group) process.kill(-child.pid!, 'SIGTERM');
  else child.kill('SIGTERM');
  return exited;
}

/** Resolves the first match of `re` in what `stream` prints (rejects when the process exits first). */
function waitFor(child: ChildProcess, stream: 'stdout' | 'stderr', re: RegExp, log: { text: string }): Promise<RegExpExecArray> {
  return new Promise((res, rej) => {
    const check = (): boolean => {
      const m = re.exec(log.text);
      if (m) res(m);
      return m !== null;
    };
    if (check()) return;
    const onData = (): void => {
      if (check()) child[stream]!.off('data', onData);
    };
    child[stream]!.on('data', onData);
    child.once('exit', (code) => rej(new Error(`reactor run exited ${code} before ${re}:\n${log.text}`)));
  });
}

function series(metrics: string, name: string, labels: string): number | undefined {
  const line = metrics.split('\n').find((l) => l.startsWith(`${name}${labels} `));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

describe('reactor run: where the time goes and progress while loading', () => {
  it('says how far the load is (health, status, metrics, viewer, plain lines when piped), then times every stage and exports the GPU busy ratio a rank knows', async () => {
    const dir = workspace();
    const go = join(dir, 'go');
    const child = spawn(process.execPath, [cli, 'run', '--manifest', join(dir, 'reactor.yaml')], {
      cwd: dir,
      env: { ...process.env, REACTOR_TEST_GO: go },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    cleanups.push(() => stop(child));
    const err = { text: '' };
    const out = { text: '' };
    child.stderr.on('data', (d: Buffer) => (err.text += d.toString()));
    child.stdout.on('data', (d: Buffer) => (out.text += d.toString()));
    const base = (await waitFor(child, 'stderr', /listening on (http:\/\/\S+)/, err))[1]!.replace(/\/$/, '');

    // Loading, held at the app's 63 %: every door says so.
    const ready = await untilValue(
      async () => {
        const r = await fetch(`${base}/health/ready`);
        return { status: r.status, body: (await r.json()) as { reasons: { code: string; message: string; progress?: unknown }[] } };
      },
      (v) => v.body.reasons[0]?.progress !== undefined,
      '/health/ready progress',
      10_000,
      50,
    );
    expect(ready.status).toBe(503);
    expect(ready.body.reasons[0]).toEqual({
      code: 'loading',
      message: 'the app is loading: downloading weights (63 %)',
      progress: { ratio: 0.63, stage: 'downloading weights' },
    });
    expect(series(await (await fetch(`${base}/metrics`)).text(), 'reactor_load_progress_ratio', '')).toBe(0.63);

    const browser = await launchWithFakeMedia();
    cleanups.push(() => browser.close());
    const page = await browser.newPage();
    await page.goto(`${base}/`);
    await page.waitForFunction(() => document.getElementById('loading-percent')?.textContent === 'loading 63 %', undefined, { timeout: 10_000 });
    expect(await page.textContent('#loading-stage')).toBe('downloading weights');

    const client = await connect(base, { WebSocket, reconnect: false });
    cleanups.push(() => client.close());
    expect(client.session).toMatchObject({ state: 'loading', progress: { ratio: 0.63, stage: 'downloading weights' } });

    // The load goes on: the ranks report their stages; then it streams.
    writeFileSync(go, '');
    await waitFor(child, 'stdout', /Viewer: (\S+)/, out);
    await page.waitForFunction(() => document.getElementById('loading')?.hidden === true, undefined, { timeout: 10_000 });
    expect(err.text).toContain('loading: downloading weights (63 %)');
    expect(err.text).toMatch(/loading: rank [01]: compiling \(\d+ %\)/);
    expect(err.text).toMatch(/loading: rank [01]: warming \(\d+ %\)/);
    expect(err.text).not.toMatch(/\r|\x1b\[/);

    let frames = 0;
    await new Promise<void>((r) => client.on('frame', () => ++frames === 20 && r()));
    const metrics = await untilValue(
      async () => (await fetch(`${base}/metrics`)).text(),
      (m) =>
        series(m, 'reactor_rank_gpu_busy_ratio', '{rank="0"}') !== undefined &&
        STAGES.every((s) => (series(m, 'reactor_step_stage_seconds_count', `{stage="${s}"}`) ?? 0) > 0),
      'stage and GPU metrics',
      10_000,
      50,
    );
    for (const stage of STAGES) expect(series(metrics, 'reactor_step_stage_seconds_count', `{stage="${stage}"}`), stage).toBeGreaterThan(0);
    expect(series(metrics, 'reactor_rank_gpu_busy_ratio', '{rank="0"}')).toBe(0.42);
    expect(series(metrics, 'reactor_rank_gpu_busy_ratio', '{rank="1"}')).toBeUndefined();
    expect(series(metrics, 'reactor_load_progress_ratio', '')).toBe(1);
    // Each step's runner part lies inside its generate.
    const sum = (s: string) => series(metrics, 'reactor_step_stage_seconds_sum', `{stage="${s}"}`)!;
    expect(sum('runner_dispatch') + sum('runner_ranks') + sum('runner_handback')).toBeLessThanOrEqual(sum('generate'));

    client.close();
    expect(await stop(child)).toBe(0);
  }, 60_000);

  it('draws a progress bar in place on a terminal (a pseudo-terminal through script)', async () => {
    const dir = workspace();
    const command = [process.execPath, cli, 'run', '--manifest', join(dir, 'reactor.yaml')].map((a) => `'${a}'`).join(' ');
    // script gives the command a pseudo-terminal and copies what it draws to its own stdout.
    const go = join(dir, 'go');
    const child = spawn('script', ['-qfc', command, '/dev/null'], {
      cwd: dir,
      stdio: ['pipe', 'pipe', 'pipe'],
      detached: true,
      env: { ...process.env, REACTOR_TEST_GO: go },
    });
    cleanups.push(() => stop(child, true));
    const out = { text: '' };
    child.stdout.on('data', (d: Buffer) => (out.text += d.toString()));
    await waitFor(child, 'stdout', /\r\x1b\[2Kloading \[###############---------\]  63 % downloading weights/, out);
    writeFileSync(go, '');
    await waitFor(child, 'stdout', /Viewer: (\S+)/, out);
    expect(out.text).toMatch(/\r\x1b\[2Kloading \[#*-*\] +\d+ % rank [01]: (compiling|warming)/);
    // The bar is cleared once loaded; no plain progress line is printed beside it.
    expect(out.text).toMatch(/\r\x1b\[2K[^\r]*ready in/);
    expect(out.text).not.toContain('loading: downloading weights');
    await stop(child, true);
  }, 60_000);
});
