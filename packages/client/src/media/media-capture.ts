/**
 * Browser capture for `client.publish()`: a camera `MediaStreamTrack` as JPEG frames of the
 * size and rate the app asks for, a microphone as mono s16 PCM chunks through an AudioWorklet.
 * DOM-only at call time; nothing here runs at import, so Node can load the module.
 */
import type { AudioSourceChunk, MediaStreamTrackLike, VideoSourceFrame } from './publication.js';

/** Options of {@link cameraFrames}. */
export interface CameraCaptureOptions {
  /** Size of every frame sent (the camera's picture is scaled to cover it, centred, cropped). */
  width: number;
  height: number;
  /** Frames per second at most. */
  fps: number;
  /** JPEG quality, 0..1. */
  quality: number;
  /** Stops capturing. */
  signal?: AbortSignal;
  /** Asked before each frame is grabbed and encoded; `true` skips it (back-pressure). */
  skip?: () => boolean;
  /** Called for each skipped frame. */
  onSkip?: () => void;
}

/** Options of {@link microphoneChunks}. */
export interface MicrophoneCaptureOptions {
  /** Samples per second of the chunks (the track's `sampleRate`, 48000 by default in the schema). */
  sampleRate: number;
  /** Milliseconds of audio per chunk (default 20). */
  chunkMs?: number;
  signal?: AbortSignal;
}

/** URL of the AudioWorklet processors, beside this module (served as `/viewer/client/pcm-worklets.js` by the viewer). */
export const PCM_WORKLETS_URL = (): string => new URL('./pcm-worklets.js', import.meta.url).href;

interface Grabber {
  /** The current picture and its natural size; `undefined` when the track ended. */
  grab(): Promise<{ image: CanvasImageSource; width: number; height: number; ptsMs: number; done(): void } | undefined>;
  close(): void;
}

type ProcessorCtor = new (init: { track: MediaStreamTrack }) => { readable: ReadableStream<VideoFrame> };

/** `MediaStreamTrackProcessor` where the browser has it (Chromium), else a muted `<video>`. */
async function grabberFor(track: MediaStreamTrack): Promise<Grabber> {
  const Processor = (globalThis as { MediaStreamTrackProcessor?: ProcessorCtor }).MediaStreamTrackProcessor;
  if (Processor) {
    const reader = new Processor({ track }).readable.getReader();
    return {
      async grab() {
        const r = await reader.read();
        if (r.done) return undefined;
        const frame = r.value;
        return { image: frame, width: frame.displayWidth, height: frame.displayHeight, ptsMs: frame.timestamp / 1000, done: () => frame.close() };
      },
      close: () => void reader.cancel().catch(() => undefined),
    };
  }
  const video = document.createElement('video');
  video.muted = true;
  video.playsInline = true;
  video.srcObject = new MediaStream([track]);
  await video.play();
  return {
    async grab() {
      if (track.readyState === 'ended') return undefined;
      if (video.readyState < 2) await new Promise((r) => video.addEventListener('loadeddata', r, { once: true }));
      return { image: video, width: video.videoWidth, height: video.videoHeight, ptsMs: performance.now(), done: () => undefined };
    },
    close: () => {
      video.pause();
      video.srcObject = null;
    },
  };
}

function wait(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (ms <= 0 || signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
    function done(): void {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    }
  });
}

/**
 * A camera track as JPEG frames of exactly `width` x `height` (scaled to cover, centred),
 * at most `fps` a second, encoded in the browser (`OffscreenCanvas.convertToBlob`).
 * @example for await (const f of cameraFrames(track, { width: 320, height: 240, fps: 15, quality: 0.8 })) send(f.jpeg);
 */
export async function* cameraFrames(source: MediaStreamTrackLike, o: CameraCaptureOptions): AsyncGenerator<VideoSourceFrame> {
  const track = source as unknown as MediaStreamTrack;
  // Ask the camera for the app's size and rate; a camera that cannot is scaled instead.
  await track.applyConstraints({ width: { ideal: o.width }, height: { ideal: o.height }, frameRate: { ideal: o.fps } }).catch(() => undefined);
  const canvas = new OffscreenCanvas(o.width, o.height);
  const ctx = canvas.getContext('2d')!;
  const grabber = await grabberFor(track);
  const interval = 1000 / o.fps;
  let due = performance.now();
  try {
    while (!o.signal?.aborted && track.readyState !== 'ended') {
      await wait(due - performance.now(), o.signal);
      if (o.signal?.aborted) break;
      // Never faster than fps, also after a stall (no catch-up burst: the server rate-limits bursts).
      due = Math.max(due, performance.now()) + interval;
      const g = await grabber.grab();
      if (!g) break;
      if (o.skip?.()) {
        g.done();
        o.onSkip?.();
        continue;
      }
      try {
        // Cover: crop the source to the target's aspect ratio, centred.
        const scale = Math.max(o.width / g.width, o.height / g.height);
        const sw = o.width / scale;
        const sh = o.height / scale;
        ctx.drawImage(g.image, (g.width - sw) / 2, (g.height - sh) / 2, sw, sh, 0, 0, o.width, o.height);
      } finally {
        g.done();
      }
      const blob = await canvas.convertToBlob({ type: 'image/jpeg', quality: o.quality });
      if (o.signal?.aborted) break;
      yield { jpeg: new Uint8Array(await blob.arrayBuffer()), width: o.width, height: o.height, ptsMs: g.ptsMs };
    }
  } finally {
    grabber.close();
  }
}

/**
 * A microphone track as mono s16 PCM chunks at `sampleRate` (an AudioWorklet converts, mixes
 * the channels down and resamples when the device runs at another rate).
 * @example for await (const c of microphoneChunks(track, { sampleRate: 48000 })) send(c.samples);
 */
export async function* microphoneChunks(source: MediaStreamTrackLike, o: MicrophoneCaptureOptions): AsyncGenerator<AudioSourceChunk> {
  const track = source as unknown as MediaStreamTrack;
  const chunkSamples = Math.max(1, Math.round((o.sampleRate * (o.chunkMs ?? 20)) / 1000));
  let ctx = new AudioContext({ sampleRate: o.sampleRate });
  let input: MediaStreamAudioSourceNode;
  try {
    input = ctx.createMediaStreamSource(new MediaStream([track]));
  } catch {
    // Some browsers cannot feed a track into a context of another rate: use the device's rate, the worklet resamples.
    await ctx.close();
    ctx = new AudioContext();
    input = ctx.createMediaStreamSource(new MediaStream([track]));
  }
  const queue: AudioSourceChunk[] = [];
  let wake: (() => void) | undefined;
  const onAbort = (): void => wake?.();
  o.signal?.addEventListener('abort', onAbort, { once: true });
  try {
    await ctx.audioWorklet.addModule(PCM_WORKLETS_URL());
    const node = new AudioWorkletNode(ctx, 'reactor-pcm-capture', {
      numberOfInputs: 1,
      numberOfOutputs: 1,
      outputChannelCount: [1],
      processorOptions: { targetRate: o.sampleRate, chunkSamples },
    });
    node.port.onmessage = (e: MessageEvent<Int16Array>) => {
      queue.push({ samples: e.data, ptsMs: performance.now() - (1000 * e.data.length) / o.sampleRate });
      // A consumer that stalls loses the oldest audio, not memory: one second at most.
      while (queue.length > Math.ceil(1000 / (o.chunkMs ?? 20))) queue.shift();
      wake?.();
    };
    // A node nobody pulls from may not run: connect it to the output through a silent gain.
    const silent = ctx.createGain();
    silent.gain.value = 0;
    input.connect(node).connect(silent).connect(ctx.destination);
    if (ctx.state === 'suspended') await ctx.resume().catch(() => undefined);
    while (!o.signal?.aborted && track.readyState !== 'ended') {
      const next = queue.shift();
      if (next) {
        yield next;
        continue;
      }
      await new Promise<void>((r) => (wake = r));
      wake = undefined;
    }
  } finally {
    o.signal?.removeEventListener('abort', onAbort);
    input.disconnect();
    await ctx.close().catch(() => undefined);
  }
}
