/**
 * The Node SDK against a real server (in this process) and the effect app: publishes camera
 * frames and microphone chunks from async iterables, uploads a picture for a command, receives
 * the transformed video and the app's audio, pauses and resumes an outbound track, and gets the
 * server's refusals as `ReactorClientError`s with their codes.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { connect, type ClientAudio, type ClientFrame, type ReactorClient, type VideoSourceFrame } from '@reactor/client';
import { serve, type ReactorServer } from '@reactor/server';
import { quiet } from './fixtures/cleanups.js';
import { EFFECT, effectApp, newEffectRecord, solidPng, type EffectAppOptions, type EffectRecord } from './fixtures/effect-app.js';

let server: ReactorServer;
let record: EffectRecord;
const clients: ReactorClient[] = [];

beforeEach(() => {
  record = newEffectRecord();
});

/** Serves the effect app (raw RGB frames out, so pixels can be compared exactly). */
async function start(options: EffectAppOptions = {}): Promise<void> {
  server = await serve(effectApp(record, options), { port: 0, gracePeriodMs: 0, logger: quiet, encoding: 'rgb' });
  await server.loaded;
}

afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  await server?.close();
});

async function client(): Promise<ReactorClient> {
  const c = await connect(server.url, { WebSocket, reconnect: false });
  clients.push(c);
  return c;
}

/** Camera frames of one grey `value` with `metadata`, as fast as the consumer takes them, until `signal` aborts. */
async function* greyFrames(value: () => number, signal: AbortSignal, everyMs = 30): AsyncGenerator<VideoSourceFrame> {
  let n = 0;
  while (!signal.aborted) {
    yield { rgb: new Uint8Array(EFFECT.width * EFFECT.height * 3).fill(value()), width: EFFECT.width, height: EFFECT.height, metadata: { n: n++ } };
    await new Promise((r) => setTimeout(r, everyMs)); // a camera's frame interval, not a synchronisation
  }
}

/** 20 ms chunks of a 1 kHz tone at 48 kHz until `signal` aborts. */
async function* tone(signal: AbortSignal): AsyncGenerator<Int16Array> {
  let phase = 0;
  while (!signal.aborted) {
    const s = new Int16Array(960);
    for (let i = 0; i < s.length; i++, phase++) s[i] = Math.round(Math.sin((2 * Math.PI * 1000 * phase) / 48_000) * 8000);
    yield s;
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Resolves with the first value of `event` that passes `pred`. */
function next<T>(c: ReactorClient, event: 'frame' | 'audio', pred: (v: T) => boolean, timeoutMs = 10_000): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      off();
      reject(new Error(`no matching ${event} within ${timeoutMs} ms`));
    }, timeoutMs);
    const off = c.on(event, ((v: T) => {
      if (!pred(v)) return;
      clearTimeout(timer);
      off();
      resolve(v);
    }) as never);
  });
}

const pixel = (f: ClientFrame): number[] => [f.payload[0]!, f.payload[1]!, f.payload[2]!];

describe('Node SDK: publish, upload, audio', () => {
  it('publishes camera frames of the declared size; the app reads them and streams them back transformed', async () => {
    await start({ soundtrack: false });
    const c = await client();
    const stop = new AbortController();
    const pub = await c.publish(
      'webcam',
      greyFrames(() => 40, stop.signal),
      { signal: stop.signal },
    );
    // The effect inverts: 40 -> 215.
    const f = await next<ClientFrame>(c, 'frame', (f) => f.trackName === 'main' && pixel(f)[0] === 215);
    expect(pixel(f)).toEqual([215, 215, 215]);
    expect([f.width, f.height]).toEqual([EFFECT.width, EFFECT.height]);
    expect([...record.videoSizes]).toEqual([`${EFFECT.width}x${EFFECT.height}`]);
    expect(record.lastMetadata).toMatchObject({ n: expect.any(Number) });
    expect(pub.framesSent).toBeGreaterThan(0);
    expect(pub.errors).toBe(0);
    stop.abort();
    await expect(pub.ended).resolves.toEqual({ reason: 'stopped' });
    expect(c.publications.size).toBe(0);
  });

  it('publishes microphone chunks; the app receives them at the declared rate', async () => {
    await start({ soundtrack: false });
    const c = await client();
    const stop = new AbortController();
    const cam = await c.publish(
      'webcam',
      greyFrames(() => 0, stop.signal),
      { signal: stop.signal },
    );
    const mic = await c.publish('mic', tone(stop.signal), { signal: stop.signal });
    await expect.poll(() => record.audioChunks, { timeout: 10_000 }).toBeGreaterThan(10);
    expect([...record.audioRates]).toEqual([EFFECT.sampleRate]);
    expect(record.audioSamples).toBe(record.audioChunks * 960);
    expect(record.audioPeak).toBeGreaterThan(7000);
    expect(mic.framesSent).toBeGreaterThanOrEqual(record.audioChunks);
    stop.abort();
    await Promise.all([cam.ended, mic.ended]);
  });

  it('receives the app audio as audio events: 48 kHz mono samples with the tone in them', async () => {
    await start();
    const c = await client();
    const stop = new AbortController();
    await c.publish(
      'webcam',
      greyFrames(() => 0, stop.signal),
      { signal: stop.signal },
    );
    const a = await next<ClientAudio>(c, 'audio', () => true);
    expect(a.trackName).toBe('soundtrack');
    expect(a.sampleRate).toBe(EFFECT.sampleRate);
    expect(a.samples).toBeInstanceOf(Int16Array);
    expect(a.samples.length).toBeGreaterThan(0);
    expect(Math.max(...a.samples.map(Math.abs))).toBeGreaterThan(10_000);
    stop.abort();
  });

  it('pauses and resumes an outbound track for this connection only', async () => {
    await start();
    const c = await client();
    const stop = new AbortController();
    await c.publish(
      'webcam',
      greyFrames(() => 0, stop.signal),
      { signal: stop.signal },
    );
    await next<ClientAudio>(c, 'audio', () => true);
    await c.pauseTrack('soundtrack');
    let audio = 0;
    c.on('audio', () => audio++);
    // While ten more video frames arrive, at most a couple of audio chunks already in flight do.
    let frames = 0;
    await next<ClientFrame>(c, 'frame', () => ++frames >= 10);
    expect(audio).toBeLessThanOrEqual(2);
    await c.resumeTrack('soundtrack');
    await next<ClientAudio>(c, 'audio', () => true);
    stop.abort();
  });

  it('uploads a picture and sends its reference in a command: the video turns towards its colour', async () => {
    await start({ soundtrack: false });
    const c = await client();
    const stop = new AbortController();
    await c.publish(
      'webcam',
      greyFrames(() => 255, stop.signal),
      { signal: stop.signal },
    );
    await next<ClientFrame>(c, 'frame', (f) => pixel(f)[0] === 0); // inverted white
    const ref = await c.upload(solidPng(8, 8, [200, 0, 100]), { name: 'tint.png', type: 'image/png' });
    expect(Object.keys(ref)).toEqual(['uploadId']);
    await c.send('set_tint', { tint: ref });
    // (0 + 200) / 2, (0 + 0) / 2, (0 + 100) / 2
    const f = await next<ClientFrame>(c, 'frame', (f) => pixel(f)[0] === 100);
    expect(pixel(f)).toEqual([100, 0, 50]);
    expect(c.state['tint']).toMatchObject({ uploadId: ref.uploadId, name: 'tint.png', mimeType: 'image/png' });
    // Bytes that are not a picture, whatever their claimed type: the server's code.
    await expect(c.upload(new TextEncoder().encode('not a picture at all'), { name: 'x.png', type: 'image/png' })).rejects.toMatchObject({
      code: 'upload_type_not_allowed',
    });
    // Naming the command: a file over its field's maxBytes (1 MB) is refused before its bytes are sent.
    await expect(c.upload(new Uint8Array(1_000_001), { name: 'huge.png', type: 'image/png', command: 'set_tint' })).rejects.toMatchObject({
      code: 'upload_too_large',
      message: expect.stringContaining('set_tint.tint takes files of at most 1000000 bytes'),
    });
    stop.abort();
  });

  it('gets refusals with their codes: unknown and outbound tracks (from the schema), a taken track, unpublishing what it does not publish', async () => {
    await start({ soundtrack: false });
    const a = await client();
    const b = await client();
    const stop = new AbortController();
    const never = greyFrames(() => 0, stop.signal);
    await expect(a.publish('nope', never)).rejects.toMatchObject({
      code: 'unknown_track',
      message: expect.stringContaining('"webcam" (video), "mic" (audio)'),
    });
    await expect(a.publish('main', never)).rejects.toMatchObject({ code: 'wrong_track_direction' });
    const pub = await a.publish(
      'webcam',
      greyFrames(() => 0, stop.signal),
      { signal: stop.signal },
    );
    await expect(
      b.publish(
        'webcam',
        greyFrames(() => 0, stop.signal),
      ),
    ).rejects.toMatchObject({ code: 'publish_refused' });
    await expect(b.unpublish('webcam')).rejects.toMatchObject({ code: 'not_publisher' });
    expect(pub.active).toBe(true);
    stop.abort();
    await pub.ended;
  });

  it('ends the publication when the server releases the track (the session ended)', async () => {
    await start({ soundtrack: false });
    const c = await client();
    const stop = new AbortController();
    const pub = await c.publish(
      'webcam',
      greyFrames(() => 0, stop.signal),
      { signal: stop.signal },
    );
    const released = new Promise((r) => c.once('track_released', r));
    await c.send('crash');
    await expect(released).resolves.toMatchObject({ track: 'webcam', reason: expect.stringContaining('crash requested') });
    await expect(pub.ended).resolves.toMatchObject({ reason: 'released', detail: expect.stringContaining('crash requested') });
    stop.abort();
  });
});
