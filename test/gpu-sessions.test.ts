/**
 * `gpu.sessions_per_gpu` (issue 42) through the door a user opens: real `reactor run --manifest`
 * instances (the sample app on one CPU rank) that share one "GPU". The GPU is a name, not a
 * device: every instance is given the same `REACTOR_GPU_DEVICE` (a fake id) and the same slot
 * folder (a fresh temporary one per test), which is exactly what instances sharing a real GPU are
 * given (the GPU's index or UUID, one folder on the host). An instance without a slot answers
 * `/health/ready` 503 `gpu_full` and refuses a client that would start a session with a
 * `gpu_full` error; a slot moves to a waiting instance when its holder is SIGKILLed or stops;
 * a session's end leaves the slot with its instance, ready for the next session; bad values of
 * the key are refused at start, leaving nothing behind.
 *
 * `gpu.admit: deadline`: each holder publishes its session's frame-time p99 in
 * `gpu-<id>.slot-<k>.health.json`; an idle holder answers 503 `gpu_busy` (and refuses a direct
 * client) while another holder's session misses the admission bound. The slow session is the
 * `slow` fault of `REACTOR_FAULTS` (every `generate()` sleeps first): deterministic, no GPU.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { GpuHealthFile } from '@reactor/distributed';
import { WebSocket } from 'ws';
import { FakeAgonesCluster } from './fixtures/agones/cluster.js';
import { FakeAgonesSidecar } from './fixtures/agones/sidecar.js';
import { cliSync, runCli, type RunningCli } from './fixtures/reactor-cli.js';
import { sampleWorkspace } from './fixtures/sample-workspace.js';
import { untilValue } from '@reactor/test-kit';

const CONFIG = 'width: 64\nheight: 48\nframesPerChunk: 4\nrolloutChunks: 12\nworldSize: 1\ndevices: cpu\nbackend: wasm\n';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

interface Ready {
  status: number;
  /** `/health/ready`'s body; `/health`'s adds the session's state. */
  body: { ready: boolean; reasons: Array<{ code: string; message: string }>; session?: string };
}

function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function workspace(gpu: string): string {
  const dir = sampleWorkspace({
    prefix: 'reactor-gpu-sessions-',
    config: CONFIG,
    server: '{ port: 0 }',
    runtime: ['session_grace_ms: 0'],
    extra: [`gpu: ${gpu}`],
  });
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** One `reactor run` on the shared fake GPU; resolves once it printed its viewer URL (loaded). */
async function instance(dir: string, slots: string, env: Record<string, string> = {}, args: string[] = []): Promise<{ cli: RunningCli; url: URL }> {
  const cli = runCli(dir, { REACTOR_GPU_SLOT_DIR: slots, REACTOR_GPU_DEVICE: 'fake-gpu-0', ...env }, args);
  cleanups.push(() => cli.stop());
  return { cli, url: new URL(await cli.url) };
}

async function ready(url: URL, path = '/health/ready'): Promise<Ready> {
  const res = await fetch(new URL(path, url));
  return { status: res.status, body: (await res.json()) as Ready['body'] };
}

/** Polls `/health/ready` until `ok` (the instances change on their own: a slot granted by the kernel). */
function until(url: URL, ok: (r: Ready) => boolean, what: string, path = '/health/ready', ms = 60_000): Promise<Ready> {
  return untilValue(() => ready(url, path), ok, what, ms, 50);
}

const isReady = (r: Ready): boolean => r.status === 200 && r.body.ready;
const isFull = (r: Ready): boolean => r.status === 503 && r.body.reasons.some((x) => x.code === 'gpu_full');

/** A client that joins directly: what it was told (welcome, state, error) until it streams a frame or is closed. */
function join_(url: URL): Promise<{ ws: WebSocket; types: string[]; error?: { code: string; message: string }; closed?: number }> {
  const ws = new WebSocket(`ws://${url.host}/ws`);
  cleanups.push(() => ws.terminate());
  return new Promise((res, rej) => {
    const types: string[] = [];
    let error: { code: string; message: string } | undefined;
    ws.once('error', rej);
    ws.on('message', (data, binary) => {
      if (binary) {
        res({ ws, types: [...types, 'frame'], ...(error && { error }) });
        return;
      }
      const msg = JSON.parse(data.toString()) as { type: string; code?: string; message?: string };
      types.push(msg.type);
      if (msg.type === 'error') error = { code: msg.code!, message: msg.message! };
    });
    ws.once('close', (code) => res({ ws, types, ...(error && { error }), closed: code }));
  });
}

/** Pids of `flock` processes holding or waiting on a slot file of `slots`. */
function flockPids(slots: string): string[] {
  const r = spawnSync('pgrep', ['-f', `flock ${slots}/`], { encoding: 'utf8' });
  return r.stdout.split('\n').filter(Boolean);
}

describe('reactor run --manifest: gpu.sessions_per_gpu', () => {
  it('N=1: the second instance is 503 gpu_full and refuses a direct client; a SIGKILL of the holder hands it the slot', async () => {
    const slots = tempDir('reactor-gpu-slots-');
    const dir = workspace('{ sessions_per_gpu: 1 }');
    const a = await instance(dir, slots);
    await until(a.url, isReady, 'the first instance to hold the slot');
    const b = await instance(dir, slots);
    // B is loaded (it printed its URL) and A holds the only slot: B cannot have one.
    const full = await ready(b.url);
    expect(full.status).toBe(503);
    expect(full.body.reasons.map((r) => r.code)).toEqual(['gpu_full']);
    expect(full.body.reasons[0]!.message).toContain('all 1 session slot of GPU fake-gpu-0 are held by other instances');

    const refused = await join_(b.url);
    expect(refused.types).toEqual(['welcome', 'error']);
    expect(refused.error?.code).toBe('gpu_full');
    expect(refused.closed).toBeDefined();

    // A serves a session meanwhile; B stays refused.
    const onA = await join_(a.url);
    expect(onA.types).toContain('frame');
    expect(onA.error).toBeUndefined();
    expect(isFull(await ready(b.url))).toBe(true);

    a.cli.child.kill('SIGKILL');
    await until(b.url, isReady, 'the second instance to take the freed slot');
    const onB = await join_(b.url);
    expect(onB.types).toContain('frame');
    expect(onB.error).toBeUndefined();
  }, 180_000);

  it("N=1: a session's end leaves the instance ready for the next session, and the waiting one still 503", async () => {
    const slots = tempDir('reactor-gpu-slots-');
    const dir = workspace('{ sessions_per_gpu: 1 }');
    const a = await instance(dir, slots);
    await until(a.url, isReady, 'the first instance to hold the slot');
    const b = await instance(dir, slots);
    expect(isFull(await ready(b.url))).toBe(true);
    const first = await join_(a.url);
    expect(first.types).toContain('frame');
    first.ws.close();
    // The session ends (grace 0) and A is ready again with its slot; B still has none.
    await until(a.url, (r) => isReady(r) && r.body.session === 'ready', 'the session on the first instance to end', '/health');
    expect(isFull(await ready(b.url))).toBe(true);
    const second = await join_(a.url);
    expect(second.types).toContain('frame');
    expect(second.error).toBeUndefined();
    // A stops in order (SIGTERM): B takes the slot.
    await a.cli.stop();
    await until(b.url, isReady, 'the second instance to take the slot A gave back');
  }, 180_000);

  it('N=2: of three instances two are ready and serve a session each, the third is refused until one stops', async () => {
    const slots = tempDir('reactor-gpu-slots-');
    const dir = workspace('{ sessions_per_gpu: 2 }');
    const all = await Promise.all([instance(dir, slots), instance(dir, slots), instance(dir, slots)]);
    // Two slots, three loaded instances: exactly two hold one.
    const states = await Promise.all(all.map((i) => until(i.url, (r) => isReady(r) || isFull(r), 'a settled readiness')));
    let holders = all.filter((_, k) => isReady(states[k]!));
    for (let tries = 0; holders.length < 2 && tries < 600; tries++) {
      await new Promise((res) => setTimeout(res, 50));
      holders = [];
      for (const i of all) if (isReady(await ready(i.url))) holders.push(i);
    }
    expect(holders.length).toBe(2);
    const waiting = all.find((i) => !holders.includes(i))!;
    expect(isFull(await ready(waiting.url))).toBe(true);
    for (const h of holders) expect((await join_(h.url)).types).toContain('frame');
    const third = await join_(waiting.url);
    expect(third.error?.code).toBe('gpu_full');
    expect(readdirSync(slots).sort()).toEqual(['gpu-fake-gpu-0.slot-0.lock', 'gpu-fake-gpu-0.slot-1.lock']);

    holders[0]!.cli.child.kill('SIGKILL');
    await until(waiting.url, isReady, 'the third instance to take the freed slot');
    expect((await join_(waiting.url)).types).toContain('frame');
  }, 240_000);

  it('under Agones (a fake SDK sidecar): a gpu_full instance keeps pinging and is not Ready() until the holder dies, then Ready()', async () => {
    const slots = tempDir('reactor-gpu-slots-');
    const dir = workspace('{ sessions_per_gpu: 1 }');
    const a = await instance(dir, slots);
    await until(a.url, isReady, 'the first instance to hold the slot');
    const c = new FakeAgonesCluster();
    c.addServer('reactor-gs-1', '127.0.0.1', 0);
    const sidecar = await FakeAgonesSidecar.start(c, 'reactor-gs-1');
    cleanups.push(() => sidecar.stop());
    const b = await instance(workspace('{ sessions_per_gpu: 1 }\nagones: { enabled: true, health_interval_ms: 200 }'), slots, sidecar.env());
    expect(isFull(await ready(b.url))).toBe(true);
    // Healthy (gpu_full passes): the pings go on, and the GameServer is not handed to Agones as Ready.
    const pingsThen = sidecar.pings.length;
    for (const end = performance.now() + 60_000; sidecar.pings.length < pingsThen + 3;) {
      if (performance.now() > end) throw new Error('timed out waiting for 3 pings');
      await new Promise((res) => setTimeout(res, 20));
    }
    expect(c.get('reactor-gs-1').state).toBe('Scheduled');
    a.cli.child.kill('SIGKILL');
    await until(b.url, isReady, 'the Agones instance to take the freed slot');
    for (const end = performance.now() + 30_000; c.get('reactor-gs-1').state !== 'Ready';) {
      if (performance.now() > end) throw new Error(`timed out waiting for Ready(); state ${c.get('reactor-gs-1').state}`);
      await new Promise((res) => setTimeout(res, 20));
    }
  }, 180_000);

  it('refuses bad values of gpu: at start, naming the key, and leaves no slot process behind', () => {
    const slots = tempDir('reactor-gpu-slots-');
    const notADir = join(slots, 'a-file');
    writeFileSync(notADir, 'x');
    for (const [gpu, bad, env] of [
      ['{ sessions_per_gpu: 0 }', 'gpu.sessions_per_gpu: must not be less than 1', {}],
      ['{ sessions_per_gpu: 65 }', 'gpu.sessions_per_gpu: must not be greater than 64', {}],
      ['{ sessions_per_gpu: 1.5 }', 'gpu.sessions_per_gpu: must be an integer number', {}],
      ['{ sessions_per_gpu: two }', 'gpu.sessions_per_gpu: must be an integer number', {}],
      ['{ slot_dir: /tmp }', 'gpu.sessions_per_gpu: is required', {}],
      [
        '{ sessions_per_gpu: 1, per_gpu: 2 }',
        'gpu.per_gpu: unknown key (allowed: sessions_per_gpu, slot_dir, device, admit, deadline_p99_intervals, deadline_margin_intervals)',
        {},
      ],
      // The other values of admit: and the deadline keys: packages/cli/test/manifest.test.ts (loadManifest, no process each).
      ['{ sessions_per_gpu: 1, admit: deadline, deadline_margin_intervals: 0.6 }', 'gpu.deadline_margin_intervals: 0.6 leaves an admission bound of 0.9', {}],
      ['{ sessions_per_gpu: 1, device: "a b" }', 'gpu.device: must be a GPU index or UUID', {}],
      [
        '{ sessions_per_gpu: 1 }',
        `gpu.slot_dir ${join(notADir, 'slots')} cannot hold the GPU's session slots`,
        { REACTOR_GPU_SLOT_DIR: join(notADir, 'slots') },
      ],
    ] as const) {
      const dir = workspace(gpu);
      const r = cliSync(['run', '--manifest', join(dir, 'reactor.yaml')], { REACTOR_GPU_DEVICE: 'fake-gpu-bad', ...env });
      expect(r.status, gpu).toBe(1);
      expect(r.stderr, gpu).toContain(bad);
      expect(r.stdout, gpu).not.toContain('Viewer:');
    }
    const last = cliSync(['run', '--manifest', join(workspace('{ sessions_per_gpu: 1 }'), 'reactor.yaml')], {
      REACTOR_GPU_DEVICE: 'fake-gpu-bad',
      REACTOR_GPU_SLOT_DIR: join(notADir, 'slots'),
    });
    expect(last.stderr).toContain('[gpu_slot_dir]');
    expect(flockPids(notADir)).toEqual([]);
  }, 120_000);
});

/** The health file of the slot whose holder runs a session, once its p99 is measured and `ok` says so. */
async function healthOf(slots: string, ok: (h: GpuHealthFile) => boolean, what: string, ms = 60_000): Promise<{ file: string; health: GpuHealthFile }> {
  const end = performance.now() + ms;
  let last: GpuHealthFile[] = [];
  for (;;) {
    last = [];
    for (const name of readdirSync(slots).filter((f) => f.endsWith('.health.json'))) {
      let h: GpuHealthFile;
      try {
        h = JSON.parse(readFileSync(join(slots, name), 'utf8')) as GpuHealthFile;
      } catch {
        continue; // never half-written (renamed into place), but it may be gone between the listing and the read
      }
      last.push(h);
      if (h.session !== null && h.p99Intervals !== null && ok(h)) return { file: join(slots, name), health: h };
    }
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}; health files: ${JSON.stringify(last)}`);
    await new Promise((res) => setTimeout(res, 50));
  }
}

/** The next binary frame on a joined client's socket. */
function nextFrame(ws: WebSocket): Promise<void> {
  return new Promise((res, rej) => {
    const on = (_: unknown, binary: boolean): void => {
      if (!binary) return;
      ws.off('message', on);
      res();
    };
    ws.on('message', on);
    ws.once('close', () => rej(new Error('the socket closed before another frame')));
  });
}

// Wide bounds, so a loaded CI machine's timer jitter is not a missed deadline: the sample app plays
// 24 fps (41.7 ms a frame); healthy is under 3 intervals (125 ms), the slow fault's gaps are ~11.
const DEADLINE = '{ sessions_per_gpu: 2, admit: deadline, deadline_p99_intervals: 4, deadline_margin_intervals: 1 }';
const SLOW = JSON.stringify([{ rank: 0, call: 1, kind: 'slow', ms: 600 }]);
const isBusy = (r: Ready): boolean => r.status === 503 && r.body.reasons.some((x) => x.code === 'gpu_busy');

describe('reactor run --manifest: gpu.admit: deadline', () => {
  it("an idle holder is 503 gpu_busy naming the slow session's p99 and refuses a direct client; the slow session goes on; its SIGKILLed holder's stale file is ignored", async () => {
    const slots = tempDir('reactor-gpu-slots-');
    const dir = workspace(DEADLINE);
    const [a, b] = await Promise.all([instance(dir, slots, { REACTOR_FAULTS: SLOW }), instance(dir, slots)]);
    // Two slots, two instances: both hold one and are idle, so both are ready.
    await until(a.url, isReady, 'the slow instance to hold a slot');
    await until(b.url, isReady, 'the second instance to hold a slot');
    expect(readdirSync(slots).filter((f) => f.endsWith('.health.json')).length).toBe(2);

    const onA = await join_(a.url);
    expect(onA.types).toContain('frame');
    const slow = await healthOf(slots, (h) => h.p99Intervals! > 3, "the slow session's p99 past the bound");
    expect(slow.health.fps).toBe(24);
    const busy = await until(b.url, isBusy, 'the idle holder to hold new sessions off');
    expect(busy.body.reasons.map((r) => r.code)).toEqual(['gpu_busy']);
    const why = busy.body.reasons[0]!.message;
    expect(why).toContain(`session ${slow.health.session} on GPU fake-gpu-0 (slot ${slow.health.slot + 1}) has frame-time p99`);
    expect(why).toMatch(/p99 \d+(\.\d)? ms = \d+(\.\d+)? frame intervals of 41\.7 ms \(24 fps\) over the last 5 s/);
    expect(why).toContain('past the admission bound of 3 (gpu.deadline_p99_intervals: 4 less gpu.deadline_margin_intervals: 1)');

    const refused = await join_(b.url);
    expect(refused.types).toEqual(['welcome', 'error']);
    expect(refused.error?.code).toBe('gpu_busy');
    expect(refused.closed).toBeDefined();
    // The slow session is not stopped: it goes on streaming (late).
    await nextFrame(onA.ws);
    expect(a.cli.stderr()).toContain(`session ${slow.health.session} misses its frame deadline`);

    // SIGKILL: nothing removes the dead holder's file; it goes stale and the idle holder is ready again.
    a.cli.child.kill('SIGKILL');
    await until(b.url, isReady, "the idle holder to ignore the dead holder's stale file");
    expect(existsSync(slow.file)).toBe(true);
    const stale = JSON.parse(readFileSync(slow.file, 'utf8')) as GpuHealthFile;
    expect(stale.session).toBe(slow.health.session);
    expect(stale.p99Intervals).toBeGreaterThan(3);
    const onB = await join_(b.url);
    expect(onB.types).toContain('frame');
    expect(onB.error).toBeUndefined();
  }, 180_000);

  it('a session that meets its deadline does not hold a new one off: both stream, and a SIGTERMed holder removes its file', async () => {
    const slots = tempDir('reactor-gpu-slots-');
    const dir = workspace(DEADLINE);
    const [a, b] = await Promise.all([instance(dir, slots), instance(dir, slots)]);
    await until(a.url, isReady, 'the first instance to hold a slot');
    await until(b.url, isReady, 'the second instance to hold a slot');
    const onA = await join_(a.url);
    expect(onA.types).toContain('frame');
    // A's session is measured (8 intervals and more) and within the bound: B admits.
    const healthy = await healthOf(slots, (h) => h.p99Intervals! <= 3, "the first session's p99, measured");
    expect(healthy.health.fps).toBe(24);
    await until(b.url, isReady, 'the second instance to admit a session beside a healthy one');
    const onB = await join_(b.url);
    expect(onB.types).toContain('frame');
    expect(onB.error).toBeUndefined();
    await nextFrame(onA.ws);
    // A stops in order: its file goes with its slot.
    const files = readdirSync(slots).filter((f) => f.endsWith('.health.json'));
    expect(files.length).toBe(2);
    await a.cli.stop();
    expect(existsSync(healthy.file)).toBe(false);
  }, 180_000);
});
