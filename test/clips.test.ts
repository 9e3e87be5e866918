/**
 * Clips and recordings through the documented doors: `reactor run --manifest` with a
 * `recording:` section, as a child process serving the sample app (picture and soundtrack), a
 * Node client that asks `clip({ seconds })`, `ffprobe` on the file, Debian's Chromium playing it
 * in a `<video>`, and a SIGKILL of the server while it records.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { connect } from '@reactor/client';
import { VIDEO_FPS as FPS } from '@reactor/app-video';
import { launchWithFakeMedia } from './fixtures/chromium.js';
import { sampleWorkspace } from './fixtures/sample-workspace.js';

const repo = resolve(import.meta.dirname, '..');
const cli = join(repo, 'packages/cli/dist/main.js');
const TOKEN = 'clip-test-token-0123456789';
/** The manifest's `server.video.key_frame_interval` (frames), in seconds of the sample app's video. */
const KEY_FRAME_INTERVAL = 24;
const KEY_FRAME_INTERVAL_S = KEY_FRAME_INTERVAL / FPS;

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** `reactor run --manifest` in `dir`; with `tmpfsBytes`, inside a private mount namespace where `dir/rec` is a tmpfs of that size. */
function startCli(dir: string, tmpfsBytes?: number): { child: ChildProcess; url: Promise<string> } {
  const args = [cli, 'run', '--manifest', join(dir, 'reactor.yaml'), '--token', TOKEN];
  const mount = `mkdir -p rec && mount -t tmpfs -o size=${tmpfsBytes} tmpfs rec && exec "$0" "$@"`;
  const child =
    tmpfsBytes === undefined
      ? spawn(process.execPath, args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] })
      : spawn('unshare', ['-m', 'sh', '-c', mount, process.execPath, ...args], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const url = new Promise<string>((res, rej) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /Viewer: (\S+)/.exec(out);
      if (m) res(new URL(m[1]!).origin);
    });
    child.once('exit', (code) => rej(new Error(`reactor run exited with ${code} before printing the viewer URL:\n${err}`)));
  });
  cleanups.push(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return { child, url };
}

interface Probe {
  streams: Array<{ codec_type: string; codec_name: string; start_time: string; duration?: string; nb_read_frames?: string; width?: number }>;
  format: { duration: string };
}

function ffprobe(file: string): Probe {
  const r = spawnSync(
    'ffprobe',
    [
      '-v',
      'error',
      '-count_frames',
      '-show_entries',
      'stream=codec_type,codec_name,start_time,duration,nb_read_frames,width:format=duration',
      '-of',
      'json',
      file,
    ],
    {
      encoding: 'utf8',
    },
  );
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as Probe;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Resolves once `count()` reaches `n` (checked at each frame event of `client`), or rejects after `timeoutMs` saying how far it got. */
function until(client: { on(e: 'frame', f: () => void): () => void }, count: () => number, n: number, what: string, timeoutMs = 30_000): Promise<void> {
  return new Promise((res, rej) => {
    if (count() >= n) return res();
    const timer = setTimeout(() => {
      off();
      rej(new Error(`${what}: ${count()} of ${n} after ${timeoutMs} ms`));
    }, timeoutMs);
    const off = client.on('frame', () => {
      if (count() < n) return;
      clearTimeout(timer);
      off();
      res();
    });
  });
}

/** The play time of each video packet of a file, s (ffprobe). */
function videoPacketDurations(file: string): number[] {
  const r = spawnSync('ffprobe', ['-v', 'error', '-select_streams', 'v:0', '-show_entries', 'packet=duration_time', '-of', 'csv=p=0', file], {
    encoding: 'utf8',
  });
  expect(r.status, r.stderr).toBe(0);
  return r.stdout
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map(Number);
}

/**
 * ffmpeg decodes every frame of a file: what it says at level `error` about the file (empty when
 * nothing is torn). The null output's own remarks (`[null @ ...]`, on the timestamps it is handed)
 * are about ffmpeg's output, not the file, and are left out.
 */
function decodeErrors(file: string): string {
  const r = spawnSync('ffmpeg', ['-v', 'error', '-i', file, '-f', 'null', '-'], { encoding: 'utf8' });
  const said = r.stderr
    .split('\n')
    .filter((l) => l.trim() !== '' && !l.startsWith('[null @'))
    .join('\n');
  return `${r.status === 0 ? '' : `exit ${r.status}\n`}${said}`;
}

describe('clips and recordings (reactor run with a recording: section)', () => {
  it('answers clip({ seconds }) with an expiring, token-guarded MP4 that ffprobe and Chromium agree on, and a SIGKILLed recording plays up to its last fragment', async () => {
    const dir = sampleWorkspace({
      prefix: 'reactor-clips-',
      name: 'clips-test',
      config: 'width: 128\nheight: 96\nframesPerChunk: 4\nworldSize: 1\ndevices: cpu\nbackend: wasm\n',
      server: `{ port: 0, encoding: jpeg, video: { key_frame_interval: ${KEY_FRAME_INTERVAL} } }`,
      extra: ['recording:', '  dir: rec', '  clip_seconds: 10', '  record: true', '  min_free_bytes: 0'],
    });
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const { child, url } = startCli(dir);
    const base = await url;
    const client = await connect(base, { WebSocket, token: TOKEN, reconnect: false });
    cleanups.push(() => client.close());
    let frames = 0;
    client.on('frame', () => frames++);
    // Five seconds of stream, counted in frames (a busy machine streams them later, not fewer).
    await until(client, () => frames, 5 * FPS, 'five seconds of stream');

    const asked = 3;
    const clip = await client.clip({ seconds: asked });
    expect(clip.url).toMatch(new RegExp(`^${base}/clips/[A-Za-z0-9_-]{24}\\.mp4\\?token=`));
    expect(Date.parse(clip.expiresAt) - Date.now()).toBeGreaterThan(23 * 3600_000);
    expect(clip.codecs).toEqual([expect.stringMatching(/^avc1\./), 'mp4a.40.2']);
    expect(clip.durationS).toBeGreaterThanOrEqual(asked);
    expect(clip.durationS).toBeLessThanOrEqual(asked + KEY_FRAME_INTERVAL_S + 0.1);

    // Access rules: the same URL without the token is refused.
    const bare = new URL(clip.url);
    bare.search = '';
    expect((await fetch(bare)).status).toBe(401);
    const res = await fetch(clip.url);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('video/mp4');
    const bytes = new Uint8Array(await res.arrayBuffer());
    expect(bytes.byteLength).toBe(clip.bytes);
    const file = join(dir, 'clip.mp4');
    writeFileSync(file, bytes);

    const p = ffprobe(file);
    const v = p.streams.find((s) => s.codec_type === 'video')!;
    const a = p.streams.find((s) => s.codec_type === 'audio')!;
    expect(v.codec_name).toBe('h264');
    expect(v.width).toBe(128);
    expect(a.codec_name).toBe('aac');
    const vDur = Number(v.duration);
    expect(Math.abs(vDur - clip.durationS)).toBeLessThan(0.05);
    expect(Number(v.nb_read_frames)).toBe(clip.frames);
    // The ring kept the span's frames (at least 3 in 4 of the nominal rate: a model slowed by a loaded machine plays fewer, each one longer).
    expect(clip.frames).toBeGreaterThanOrEqual(Math.floor(clip.durationS * FPS * 0.75));
    // A/V start together (within one AAC frame, 1024 samples at 48 kHz = 21 ms, plus a frame).
    expect(Math.abs(Number(v.start_time) - Number(a.start_time))).toBeLessThan(0.06);
    expect(Math.abs(Number(a.duration) - vDur)).toBeLessThan(0.15);

    // Chromium plays it: its duration, decoded frames and decoded audio.
    const browser = await launchWithFakeMedia();
    cleanups.push(() => browser.close());
    const page = await browser.newPage();
    await page.goto(`${base}/health/live`);
    const played = await page.evaluate(async (src) => {
      const video = document.createElement('video');
      video.muted = false;
      video.src = src;
      document.body.append(video);
      await new Promise<void>((res, rej) => {
        video.onloadedmetadata = () => res();
        video.onerror = () => rej(new Error(`video error ${video.error?.code}: ${video.error?.message}`));
      });
      await video.play();
      // Played for a second (an event of the element, not a sleep: a busy machine plays slower).
      await new Promise<void>((res, rej) => {
        const t = setTimeout(() => rej(new Error(`the clip played only to ${video.currentTime} s in 20 s`)), 20_000);
        const check = (): void => {
          if (video.currentTime >= 1 || video.ended) {
            clearTimeout(t);
            res();
          }
        };
        video.ontimeupdate = check;
        video.onended = check;
        check();
      });
      const q = video.getVideoPlaybackQuality();
      return {
        duration: video.duration,
        frames: q.totalVideoFrames,
        audioBytes: (video as HTMLVideoElement & { webkitAudioDecodedByteCount: number }).webkitAudioDecodedByteCount,
        width: video.videoWidth,
        time: video.currentTime,
      };
    }, clip.url);
    expect(Math.abs(played.duration - clip.durationS)).toBeLessThan(0.1);
    expect(played.width).toBe(128);
    expect(played.frames).toBeGreaterThan(10);
    expect(played.audioBytes).toBeGreaterThan(0);
    expect(played.time).toBeGreaterThan(0.5);

    // The viewer: its clip button answers a playable clip, its list shows the recording being written.
    const viewer = await browser.newPage();
    await viewer.goto(`${base}/?token=${TOKEN}`);
    await viewer.waitForFunction(() => (window as unknown as { reactorViewer: { framesDrawn: number } }).reactorViewer.framesDrawn > 0);
    await viewer.selectOption('#clip-seconds', '10');
    await viewer.click('#clip-button');
    await viewer.waitForSelector('#clip-preview');
    const preview = await viewer.evaluate(async () => {
      const v = document.getElementById('clip-preview') as HTMLVideoElement;
      if (v.readyState < 1) await new Promise((r) => (v.onloadedmetadata = r));
      return { duration: v.duration, link: document.querySelector<HTMLAnchorElement>('#clip-out a')!.href };
    });
    expect(preview.duration).toBeGreaterThan(5);
    expect(preview.link).toMatch(/\/clips\/[\w-]{24}\.mp4/);
    await viewer.waitForSelector('#recordings li a');
    expect(await viewer.textContent('#recordings')).toMatch(/_.*\.mp4 · recording · /);
    expect(await viewer.textContent('#record-button')).toBe('Stop recording');

    // The listing shows the session's recording being written; then the server is killed.
    const listed = (await (await fetch(`${base}/recordings?token=${TOKEN}`)).json()) as { recordings: Array<{ name: string; state: string; bytes: number }> };
    expect(listed.recordings).toHaveLength(1);
    expect(listed.recordings[0]!.state).toBe('recording');
    // The stream goes on while clipping, to seven seconds of it in all (counted in frames, not waited for by the clock).
    await until(client, () => frames, Math.max(frames + 1, 7 * FPS), 'seven seconds of stream');
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    const rec = readdirSync(join(dir, 'rec')).filter((n) => n.endsWith('.mp4'));
    expect(rec).toHaveLength(1);
    const rp = ffprobe(join(dir, 'rec', rec[0]!));
    const rv = rp.streams.find((s) => s.codec_type === 'video')!;
    expect(rv.codec_name).toBe('h264');
    expect(rp.streams.some((s) => s.codec_type === 'audio' && s.codec_name === 'aac')).toBe(true);
    // At least 7 s were streamed; complete fragments of all but the last group of pictures are in it.
    expect(Number(rv.nb_read_frames)).toBeGreaterThan(4 * FPS);
    const decode = spawnSync('ffmpeg', ['-v', 'error', '-i', join(dir, 'rec', rec[0]!), '-f', 'null', '-'], { encoding: 'utf8' });
    expect(decode.status).toBe(0);
  }, 60_000);

  it('after a stall (the server SIGSTOPped for 2 s): a recording across it keeps its sound to its end, a clip right after it has sound and no frozen frame, and a recording started after it is written as it goes, downloaded live and playable after SIGKILL', async () => {
    const dir = sampleWorkspace({
      prefix: 'reactor-clipgap-',
      name: 'clipgap-test',
      config: 'width: 128\nheight: 96\nframesPerChunk: 4\nworldSize: 1\ndevices: cpu\nbackend: wasm\n',
      server: `{ port: 0, encoding: jpeg, video: { key_frame_interval: ${KEY_FRAME_INTERVAL} } }`,
      extra: ['recording:', '  dir: rec', '  clip_seconds: 10', '  min_free_bytes: 0'],
    });
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const { child, url } = startCli(dir);
    const base = await url;
    const client = await connect(base, { WebSocket, token: TOKEN, reconnect: false });
    cleanups.push(() => client.close());
    let frames = 0;
    client.on('frame', () => frames++);
    const list = async (): Promise<Array<{ name: string; state: string; bytes: number }>> =>
      ((await (await fetch(`${base}/recordings?token=${TOKEN}`)).json()) as { recordings: Array<{ name: string; state: string; bytes: number }> }).recordings;

    // A recording that spans the stall: 3 s of stream before it (at least two groups of pictures).
    await until(client, () => frames, 1, 'first frame');
    const across = await client.recording('start');
    const at = frames;
    await until(client, () => frames, at + 3 * FPS, 'frames before the stall');
    // The stall: the whole server stops for 2 s (a stream stalled under load); its playout restarts after it.
    child.kill('SIGSTOP');
    await sleep(2000);
    child.kill('SIGCONT');
    const after = frames;
    await until(client, () => frames, after + Math.ceil(FPS / 2), 'frames after the stall');

    // A clip right after the stall: of the 3 s asked, most is from before it.
    const asked = 3;
    const clip = await client.clip({ seconds: asked });
    expect(clip.codecs).toEqual([expect.stringMatching(/^avc1\./), 'mp4a.40.2']);
    expect(clip.durationS).toBeGreaterThanOrEqual(asked);
    expect(clip.durationS).toBeLessThanOrEqual(asked + KEY_FRAME_INTERVAL_S + 0.1);
    const clipFile = join(dir, 'clip.mp4');
    writeFileSync(clipFile, new Uint8Array(await (await fetch(clip.url)).arrayBuffer()));
    const cp = ffprobe(clipFile);
    const cv = cp.streams.find((x) => x.codec_type === 'video')!;
    const ca = cp.streams.find((x) => x.codec_type === 'audio');
    expect(ca?.codec_name).toBe('aac');
    expect(Math.abs(Number(cv.duration) - clip.durationS)).toBeLessThan(0.05);
    expect(Math.abs(Number(ca!.duration) - Number(cv.duration))).toBeLessThan(0.15);
    // No frame stands for the stall: none lasts more than a few frames of a loaded machine's pace.
    expect(Math.max(...videoPacketDurations(clipFile))).toBeLessThan(0.25);

    // The recording across the stall: its sound lasts as long as its picture.
    const stopped = await client.recording('stop');
    expect(stopped.name).toBe(across.name);
    const ap = ffprobe(join(dir, 'rec', across.name));
    const av = ap.streams.find((x) => x.codec_type === 'video')!;
    const aa = ap.streams.find((x) => x.codec_type === 'audio');
    expect(aa?.codec_name).toBe('aac');
    expect(Number(av.duration)).toBeGreaterThan(3 + 2);
    expect(Math.abs(Number(aa!.duration) - Number(av.duration))).toBeLessThan(0.15);
    expect(decodeErrors(join(dir, 'rec', across.name))).toBe('');

    // A recording started after the stall is written as it goes: fragments reach the disk while it records.
    const rec = await client.recording('start');
    const written = (): Promise<number> => list().then((l) => l.find((r) => r.name === rec.name)?.bytes ?? 0);
    const t0 = frames;
    await until(client, () => frames, t0 + 3 * KEY_FRAME_INTERVAL, 'frames while recording');
    await expect.poll(written, { timeout: 20_000, interval: 200 }).toBeGreaterThan(10_000);
    // A live download gets the bytes so far, and they play, sound included.
    const live = await fetch(`${base}/recordings/${rec.name}?token=${TOKEN}`);
    expect(live.status).toBe(200);
    const liveBytes = new Uint8Array(await live.arrayBuffer());
    expect(liveBytes.byteLength).toBeGreaterThan(10_000);
    const liveFile = join(dir, 'live.mp4');
    writeFileSync(liveFile, liveBytes);
    const lp = ffprobe(liveFile);
    expect(lp.streams.map((x) => x.codec_name).sort()).toEqual(['aac', 'h264']);
    // SIGKILL: the file plays up to its last whole fragment, sound included, listed as interrupted after a restart.
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    const kp = ffprobe(join(dir, 'rec', rec.name));
    const kv = kp.streams.find((x) => x.codec_type === 'video')!;
    const ka = kp.streams.find((x) => x.codec_type === 'audio');
    expect(ka?.codec_name).toBe('aac');
    expect(Number(kv.nb_read_frames)).toBeGreaterThan(KEY_FRAME_INTERVAL);
    // The muxer interleaves the tracks by time: a fragment holds both up to the same instant, give or take an AAC frame and a video frame.
    expect(Math.abs(Number(ka!.duration) - Number(kv.duration))).toBeLessThan(0.15);
    expect(decodeErrors(join(dir, 'rec', rec.name))).toBe('');
  }, 90_000);

  it('on a nearly full disk (a 3 MiB tmpfs) stops the recording with disk_full on a whole fragment, refuses a new one and a clip with disk_full, and the stream goes on', async () => {
    const dir = sampleWorkspace({
      prefix: 'reactor-diskfull-',
      name: 'diskfull-test',
      config: 'width: 256\nheight: 192\nframesPerChunk: 4\nworldSize: 1\ndevices: cpu\nbackend: wasm\n',
      server: '{ port: 0, encoding: jpeg }',
      extra: ['recording:', '  dir: rec', '  min_free_bytes: 1500000'],
    });
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const { url } = startCli(dir, 3 * 1024 * 1024);
    const base = await url;
    const client = await connect(base, { WebSocket, token: TOKEN, reconnect: false });
    cleanups.push(() => client.close());
    let frames = 0;
    client.on('frame', () => frames++);
    await until(client, () => frames, 1, 'first frame');
    const rec = await client.recording('start');
    expect(rec.state).toBe('recording');
    const list = async (): Promise<Array<{ name: string; state: string; bytes: number }>> =>
      ((await (await fetch(`${base}/recordings?token=${TOKEN}`)).json()) as { recordings: Array<{ name: string; state: string; bytes: number }> }).recordings;
    await expect.poll(async () => (await list()).find((r) => r.name === rec.name)?.state, { timeout: 45_000, interval: 200 }).toBe('disk_full');
    // Asked at once: the recording that stopped by itself is not in the way, the disk is.
    const again = await client.recording('start').then(
      () => undefined,
      (e: { code: string; message: string }) => e,
    );
    expect(again?.code).toBe('disk_full');
    expect(again?.message).toMatch(/below recording\.min_free_bytes \(1500000\) plus room for one fragment \(\d+ bytes, the largest written\)/);
    // All of the ring: it holds the refused fragment's frames and more, so it cannot fit either.
    const clip = await client.clip().then(
      () => undefined,
      (e: { code: string }) => e,
    );
    expect(clip?.code).toBe('disk_full');
    // The file ends on a whole fragment: every frame of it decodes, nothing is torn.
    const listed = await list();
    expect(listed.map((r) => r.state)).toEqual(['disk_full']);
    const got = new Uint8Array(await (await fetch(`${base}/recordings/${rec.name}?token=${TOKEN}`)).arrayBuffer());
    expect(got.byteLength).toBe(listed[0]!.bytes);
    const file = join(dir, 'full.mp4');
    writeFileSync(file, got);
    expect(Number(ffprobe(file).streams.find((x) => x.codec_type === 'video')!.nb_read_frames)).toBeGreaterThan(0);
    expect(decodeErrors(file)).toBe('');
    const before = frames;
    await until(client, () => frames, before + 10, 'frames after disk_full');
  }, 90_000);

  it('answers recording start on a full disk (min_free_bytes: 0) with disk_full and leaves no file behind', async () => {
    const dir = sampleWorkspace({
      prefix: 'reactor-diskfull0-',
      name: 'diskfull0-test',
      config: 'width: 128\nheight: 96\nframesPerChunk: 4\nworldSize: 1\ndevices: cpu\nbackend: wasm\n',
      server: '{ port: 0, encoding: jpeg }',
      extra: ['recording:', '  dir: rec', '  min_free_bytes: 0'],
    });
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const { child, url } = startCli(dir, 512 * 1024);
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const base = await url;
    const client = await connect(base, { WebSocket, token: TOKEN, reconnect: false });
    cleanups.push(() => client.close());
    let frames = 0;
    client.on('frame', () => frames++);
    await until(client, () => frames, 1, 'first frame');
    // Fill the server's tmpfs (it is mounted in the server's own mount namespace: reached through /proc/<pid>/root).
    const rec = join(`/proc/${child.pid}/root`, dir, 'rec');
    try {
      writeFileSync(join(rec, 'filler'), new Uint8Array(1024 * 1024));
    } catch (err) {
      expect((err as NodeJS.ErrnoException).code).toBe('ENOSPC');
    }
    const failed = await client.recording('start').then(
      () => undefined,
      (e: { code: string; message: string }) => e,
    );
    expect(failed?.code).toBe('disk_full');
    expect(failed?.message).toMatch(/disk of .*rec is full/);
    expect(readdirSync(rec)).toEqual(['filler']);
    const listed = (await (await fetch(`${base}/recordings?token=${TOKEN}`)).json()) as { recordings: unknown[] };
    expect(listed.recordings).toEqual([]);
    // The stream goes on, and nothing was left open for the garbage collector to close.
    const before = frames;
    await until(client, () => frames, before + 10, 'frames after the refusal');
    expect(stderr).not.toMatch(/FileHandle|file descriptor/);
  }, 60_000);
});
