import { describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { type DecodedFrame, decodeFrame, FrameEncoding, type ServerMessage } from '@reactor/client';
import type { AppHost } from '@reactor/runtime';
import { AUDIO_QUEUE_FACTOR, serve, type ServeOptions } from '../src/index.js';
import { avApp, type AvAppOptions } from './fixtures/av-app.js';
import { quiet, useCleanups } from './fixtures/cleanups.js';
import { stalledClient } from './fixtures/net.js';

const cleanups = useCleanups();

type Event = { kind: 'text'; msg: ServerMessage } | { kind: 'bin'; frame: DecodedFrame; samples?: Int16Array };

/** A `ws` client that records texts and binary frames in one list, in arrival order. */
class AvClient {
  readonly ws: WebSocket;
  readonly events: Event[] = [];
  #waiters: Array<() => void> = [];

  constructor(url: string) {
    this.ws = new WebSocket(url);
    this.ws.on('error', () => undefined);
    this.ws.on('message', (data: Buffer, isBinary) => {
      if (isBinary) {
        const frame = decodeFrame(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
        const samples =
          frame.encoding === FrameEncoding.PcmS16le
            ? new Int16Array(frame.payload.buffer.slice(frame.payload.byteOffset, frame.payload.byteOffset + frame.payload.byteLength))
            : undefined;
        this.events.push({ kind: 'bin', frame, ...(samples ? { samples } : {}) });
      } else {
        this.events.push({ kind: 'text', msg: JSON.parse(String(data)) as ServerMessage });
      }
      for (const w of this.#waiters.splice(0)) w();
    });
    cleanups.push(() => this.ws.close());
  }

  /** Resolves once `pred` holds over the recorded events (checked on every message). */
  async until(pred: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
    const end = Date.now() + timeoutMs;
    while (!pred()) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}; last: ${JSON.stringify(this.events.slice(-3).map(brief))}`);
      await new Promise<void>((resolve) => {
        this.#waiters.push(resolve);
        setTimeout(resolve, 200);
      });
    }
  }

  async open(): Promise<this> {
    await this.until(() => this.texts.some((m) => m.type === 'welcome'), 'welcome');
    return this;
  }

  get texts(): ServerMessage[] {
    return this.events.flatMap((e) => (e.kind === 'text' ? [e.msg] : []));
  }
  get frames(): Array<Extract<Event, { kind: 'bin' }>> {
    return this.events.flatMap((e) => (e.kind === 'bin' ? [e] : []));
  }
  audio(): Array<Extract<Event, { kind: 'bin' }>> {
    return this.frames.filter((f) => f.frame.encoding === FrameEncoding.PcmS16le);
  }
  video(): Array<Extract<Event, { kind: 'bin' }>> {
    return this.frames.filter((f) => f.frame.encoding !== FrameEncoding.PcmS16le);
  }

  /** Sends a message with an id and resolves with its answer, and the index of the answer among the events. */
  async ask(msg: Record<string, unknown> & { id: string }): Promise<{ answer: ServerMessage; at: number }> {
    this.ws.send(JSON.stringify(msg));
    const find = (): number => this.events.findIndex((e) => e.kind === 'text' && (e.msg.type === 'reply' || e.msg.type === 'error') && e.msg.id === msg.id);
    await this.until(() => find() >= 0, `the answer to ${msg.id}`);
    const at = find();
    return { answer: (this.events[at] as { msg: ServerMessage }).msg, at };
  }
}

function brief(e: Event): string {
  return e.kind === 'text' ? e.msg.type : `${e.frame.encoding === FrameEncoding.PcmS16le ? 'audio' : 'video'}#${e.frame.seq}`;
}

async function start(app: AvAppOptions = {}, opts: ServeOptions = {}) {
  const server = await serve(avApp(app), { port: 0, gracePeriodMs: 0, logger: quiet, ...opts });
  cleanups.push(() => server.close());
  await server.loaded;
  return server;
}

describe('server: audio out', () => {
  it('sends each audio chunk as a PCM s16le frame, encoded once for every client, right after its video frame with the same pts', async () => {
    const server = await start({ fps: 50, chunk: 2 }, { maxQueuedFrames: 100 });
    const a = await new AvClient(server.wsUrl).open();
    const b = await new AvClient(server.wsUrl).open();
    await a.until(() => a.audio().length >= 20 && b.audio().length >= 20, '20 audio chunks on both clients');
    const welcome = a.texts.find((m) => m.type === 'welcome');
    if (welcome?.type !== 'welcome') throw new Error('no welcome');
    const sound = welcome.schema.tracks.findIndex((t) => t.name === 'sound');
    const main = welcome.schema.tracks.findIndex((t) => t.name === 'main_video');
    expect(welcome.schema.tracks[sound]).toEqual({ name: 'sound', kind: 'audio', direction: 'out', sampleRate: 16_000 });

    for (const c of [a, b]) {
      const audio = c.audio();
      // 16 kHz at 50 fps: 320 samples a frame, header width = sample count, height = 1.
      for (const f of audio) expect([f.frame.track, f.frame.width, f.frame.height, f.samples!.length]).toEqual([sound, 320, 1, 320]);
      // Every sample once and in order, across chunks (sample k of the session is k % 32768).
      const first = audio[0]!.samples![0]!;
      const got = audio.flatMap((f) => Array.from(f.samples!));
      expect(got).toEqual(Array.from({ length: got.length }, (_, i) => (first + i) % 32768));
      // Each chunk arrives right after the frame it belongs to: the next seq, the same pts.
      const frames = c.frames;
      for (let i = 0; i < frames.length; i++) {
        if (frames[i]!.frame.encoding !== FrameEncoding.PcmS16le) continue;
        const v = frames[i - 1];
        if (v === undefined) continue; // joined between a frame and its audio
        expect([v.frame.track, v.frame.seq + 1, v.frame.ptsMs]).toEqual([main, frames[i]!.frame.seq, frames[i]!.frame.ptsMs]);
      }
    }
    // The same chunk (same seq) carries the same bytes to both clients.
    const bBySeq = new Map(b.audio().map((f) => [f.frame.seq, f]));
    const shared = a.audio().filter((f) => bBySeq.has(f.frame.seq));
    expect(shared.length).toBeGreaterThan(10);
    for (const f of shared) expect(Array.from(f.samples!)).toEqual(Array.from(bBySeq.get(f.frame.seq)!.samples!));

    const text = await (await fetch(`${server.url}/metrics`)).text();
    const value = (name: string): number => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
    const emitted = value('reactor_audio_chunks_emitted_total\\{track="sound"\\}');
    const played = (server.host as AppHost).counters.audioChunksPlayed;
    // Encoded (emitted) once per chunk however many clients; sent once per client.
    expect(emitted).toBeGreaterThanOrEqual(20);
    expect(emitted).toBeLessThanOrEqual(played);
    expect(value('reactor_audio_chunks_sent_total')).toBeGreaterThanOrEqual(2 * emitted - 6);
    expect(text).toContain('reactor_audio_chunks_dropped_total{reason="slow_client"} 0');
  });

  it('pause_track stops one outbound track for this connection only, from its reply on; resume_track starts again with the next chunk', async () => {
    const server = await start({ fps: 50, chunk: 1 }, { maxQueuedFrames: 100 });
    const a = await new AvClient(server.wsUrl).open();
    const b = await new AvClient(server.wsUrl).open();
    await a.until(() => a.audio().length >= 3, 'audio');

    const paused = await a.ask({ type: 'pause_track', id: 'p', track: 'sound' });
    expect(paused.answer).toEqual({ type: 'reply', id: 'p' });
    const pausedAt = a.events.length;
    // The stream goes on: b hears 10 more chunks, a sees the frames but hears nothing.
    const bHeard = b.audio().length;
    await b.until(() => b.audio().length >= bHeard + 10, 'b to hear on');
    const lastHeardByB = b.audio().at(-1)!.frame.seq;
    await a.until(() => a.video().some((f) => f.frame.seq > lastHeardByB), 'a to see past that');
    const afterPause = a.events.slice(paused.at + 1).filter((e) => e.kind === 'bin');
    expect(afterPause.length).toBeGreaterThan(5);
    expect(afterPause.filter((e) => e.frame.encoding === FrameEncoding.PcmS16le)).toEqual([]);
    expect(server.connections().find((c) => c.pausedTracks.length > 0)?.pausedTracks).toEqual(['sound']);
    // Pausing twice is no error.
    expect((await a.ask({ type: 'pause_track', id: 'p2', track: 'sound' })).answer).toEqual({ type: 'reply', id: 'p2' });

    const resumed = await a.ask({ type: 'resume_track', id: 'r', track: 'sound' });
    expect(resumed.answer).toEqual({ type: 'reply', id: 'r' });
    await a.until(() => a.events.slice(resumed.at).some((e) => e.kind === 'bin' && e.frame.encoding === FrameEncoding.PcmS16le), 'audio again');
    const before = a.events.slice(pausedAt, resumed.at).flatMap((e) => (e.kind === 'bin' ? [e.frame.seq] : []));
    const firstAgain = a.events.slice(resumed.at).find((e) => e.kind === 'bin' && e.frame.encoding === FrameEncoding.PcmS16le)!;
    // It starts with a chunk played after the resume: newer than anything a received before.
    expect((firstAgain as { frame: DecodedFrame }).frame.seq).toBeGreaterThan(Math.max(...before));

    // Pausing the video too leaves a connection that receives nothing, while the model runs on.
    expect((await a.ask({ type: 'pause_track', id: 'pv', track: 'main_video' })).answer).toEqual({ type: 'reply', id: 'pv' });
    expect((await a.ask({ type: 'pause_track', id: 'pa', track: 'sound' })).answer).toEqual({ type: 'reply', id: 'pa' });
    const quietFrom = a.events.length;
    const steps = (server.host as AppHost).counters.steps;
    const seen = b.frames.length;
    await b.until(() => b.frames.length >= seen + 20, 'b to receive on');
    expect((server.host as AppHost).counters.steps).toBeGreaterThan(steps);
    // a's socket carries answers in order with frames: an answer sent now arrives after anything queued before.
    expect((await a.ask({ type: 'resume_track', id: 'probe', track: 'nothing' })).answer).toMatchObject({ code: 'unknown_track' });
    expect(a.events.slice(quietFrom).filter((e) => e.kind === 'bin')).toEqual([]);
  });

  it('answers a bad pause_track with unknown_track, wrong_track_direction or malformed_message, and keeps the connection', async () => {
    const server = await start();
    const a = await new AvClient(server.wsUrl).open();
    expect((await a.ask({ type: 'pause_track', id: '1', track: 'soundz' })).answer).toEqual({
      type: 'error',
      id: '1',
      code: 'unknown_track',
      message: `unknown track "soundz"; this app's outbound tracks: main_video, sound`,
    });
    expect((await a.ask({ type: 'resume_track', id: '2', track: 'cam' })).answer).toEqual({
      type: 'error',
      id: '2',
      code: 'wrong_track_direction',
      message: 'track "cam" is an inbound track (clients publish it); only outbound tracks can be paused: main_video, sound',
    });
    expect((await a.ask({ type: 'pause_track', id: '3', track: 7 })).answer).toMatchObject({ type: 'error', id: '3', code: 'malformed_message' });
    expect((await a.ask({ type: 'pause_track', id: '4', track: 'sound', extra: 1 })).answer).toMatchObject({
      type: 'error',
      id: '4',
      code: 'malformed_message',
    });
    expect((await a.ask({ type: 'command', id: '5', name: 'reset' })).answer).toEqual({ type: 'reply', id: '5' });
    const text = await (await fetch(`${server.url}/metrics`)).text();
    expect(text).toContain('reactor_command_results_total{code="unknown_track"} 1');
    expect(text).toContain('reactor_command_results_total{code="wrong_track_direction"} 1');
  });

  it('a client that stops reading loses video frames first, then audio beyond its own bound; its queue stays bounded', async () => {
    // Raw RGB 128x128 (49 KB a frame) at 50 fps with a small socket allowance: the stalled socket fills fast.
    const server = await start({ width: 128, height: 128, fps: 50, chunk: 1 }, { encoding: 'rgb', maxBufferedBytes: 64 * 1024 });
    const healthy = await new AvClient(server.wsUrl).open();
    const socket = await stalledClient(server.port);
    cleanups.push(() => socket.destroy());
    const limitFrames = 2;
    const limitAudio = AUDIO_QUEUE_FACTOR * limitFrames;
    type Snap = { framesDropped: number; audioDropped: number; queuedFrames: number; queuedAudio: number };
    const snaps: Snap[] = [];
    const stalledInfo = (): Snap | undefined => {
      const conns = server.connections();
      if (conns.length < 2) return undefined;
      return conns.reduce((x, y) => (x.framesDropped >= y.framesDropped ? x : y));
    };
    // A snapshot on every message the healthy client gets: at most one frame and its chunk are played in between.
    await healthy.until(
      () => {
        const s = stalledInfo();
        if (s) snaps.push({ framesDropped: s.framesDropped, audioDropped: s.audioDropped, queuedFrames: s.queuedFrames, queuedAudio: s.queuedAudio });
        return s !== undefined && s.audioDropped >= 5;
      },
      'the stalled client to lose audio',
      30_000,
    );
    const firstLoss = snaps.find((s) => s.framesDropped > 0 || s.audioDropped > 0)!;
    expect(firstLoss.framesDropped).toBeGreaterThan(0);
    expect(firstLoss.audioDropped).toBe(0);
    for (const s of snaps) {
      expect(s.queuedFrames).toBeLessThanOrEqual(limitFrames);
      expect(s.queuedAudio).toBeLessThanOrEqual(limitAudio);
    }
    const last = snaps.at(-1)!;
    // Audio is lost only once its own bound overflowed: later, and less, than the frames.
    expect(last.framesDropped).toBeGreaterThan(last.audioDropped);
    const text = await (await fetch(`${server.url}/metrics`)).text();
    expect(Number(/^reactor_audio_chunks_dropped_total\{reason="slow_client"\} (\S+)$/m.exec(text)?.[1])).toBeGreaterThanOrEqual(5);
    // The healthy client lost nothing.
    const healthyInfo = server.connections().find((c) => c.framesDropped === 0 && c.audioDropped === 0);
    expect(healthyInfo).toBeDefined();
  });
});
