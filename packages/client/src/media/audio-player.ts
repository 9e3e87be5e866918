/**
 * A browser player for an app's outbound audio track: feed it the client's `audio` events, it
 * plays them through an AudioWorklet with a small jitter buffer. DOM-only (`@reactor/client/browser`).
 */
import type { ClientAudio } from './media-types.js';
import { PCM_WORKLETS_URL } from './media-capture.js';

/** Options of an {@link AudioPlayer}. */
export interface AudioPlayerOptions {
  /** Samples per second of the track (its `sampleRate` in the schema). */
  sampleRate: number;
  /** Audio queued before playback starts, and again after an underrun, ms (default 60). */
  jitterMs?: number;
  /** Latency bound: beyond this much queued audio the oldest is dropped, ms (default 400). */
  maxLatencyMs?: number;
  /** Start muted (default `false`). */
  muted?: boolean;
}

/**
 * Plays mono s16 PCM chunks. Browsers start audio only after a user gesture unless the page
 * may autoplay: call {@link resume} from a click when {@link suspended} is `true`.
 * @example
 * const player = new AudioPlayer({ sampleRate: 48000 });
 * await player.start();
 * client.on('audio', (a) => player.push(a));
 * muteButton.onclick = () => (player.muted = !player.muted);
 */
export class AudioPlayer {
  /** The player's audio context (runs at the track's rate where the browser allows). */
  readonly context: AudioContext;
  /** The player's last node (volume, mute) before the speakers: connect an `AnalyserNode` to it to watch the signal. */
  readonly output: GainNode;
  /** Underruns so far (the queue ran dry and playback re-buffered). */
  underruns = 0;
  readonly #options: Required<AudioPlayerOptions>;
  #node: AudioWorkletNode | undefined;
  #starting: Promise<void> | undefined;
  #early: Int16Array[] = [];
  #muted: boolean;

  constructor(options: AudioPlayerOptions) {
    if (!(options.sampleRate > 0)) throw new RangeError(`options.sampleRate must be a positive number, got ${options.sampleRate}`);
    this.#options = { jitterMs: 60, maxLatencyMs: 400, muted: false, ...options };
    let ctx: AudioContext;
    try {
      ctx = new AudioContext({ sampleRate: options.sampleRate, latencyHint: 'interactive' });
    } catch {
      ctx = new AudioContext({ latencyHint: 'interactive' }); // the worklet resamples
    }
    this.context = ctx;
    this.output = ctx.createGain();
    this.#muted = this.#options.muted;
    this.output.gain.value = this.#muted ? 0 : 1;
    this.output.connect(ctx.destination);
  }

  /** `true` while the browser holds audio back for a user gesture: call {@link resume} from a click. */
  get suspended(): boolean {
    return this.context.state === 'suspended';
  }

  get muted(): boolean {
    return this.#muted;
  }

  /** Mutes or unmutes (the audio keeps flowing, so unmuting is instant and in sync). */
  set muted(m: boolean) {
    this.#muted = m;
    this.output.gain.setTargetAtTime(m ? 0 : 1, this.context.currentTime, 0.01);
  }

  /** Loads the worklet and starts playing; idempotent. */
  start(): Promise<void> {
    this.#starting ??= (async () => {
      await this.context.audioWorklet.addModule(PCM_WORKLETS_URL());
      const sr = this.#options.sampleRate;
      const node = new AudioWorkletNode(this.context, 'reactor-pcm-player', {
        numberOfInputs: 0,
        numberOfOutputs: 1,
        outputChannelCount: [1],
        processorOptions: {
          inputRate: sr,
          jitterSamples: Math.round((sr * this.#options.jitterMs) / 1000),
          maxSamples: Math.round((sr * this.#options.maxLatencyMs) / 1000),
        },
      });
      node.port.onmessage = (e: MessageEvent<{ underruns?: number }>) => {
        if (typeof e.data.underruns === 'number') this.underruns = e.data.underruns;
      };
      node.connect(this.output);
      this.#node = node;
      for (const s of this.#early) node.port.postMessage({ samples: s }, [s.buffer]);
      this.#early = [];
      await this.resume();
    })();
    return this.#starting;
  }

  /** Resumes a context the browser suspended (call it from a user gesture). */
  async resume(): Promise<void> {
    if (this.context.state === 'suspended') await this.context.resume();
  }

  /** Queues one chunk (a client `audio` event or bare samples); chunks before {@link start} finished wait for it. */
  push(chunk: ClientAudio | Int16Array): void {
    const samples = chunk instanceof Int16Array ? chunk : chunk.samples;
    const copy = samples.slice(); // the worklet takes the buffer over
    if (this.#node) this.#node.port.postMessage({ samples: copy }, [copy.buffer]);
    else if (this.#early.length < 50) this.#early.push(copy);
  }

  /** Drops the queued audio (a `flush`). */
  clear(): void {
    this.#early = [];
    this.#node?.port.postMessage({ clear: true });
  }

  /** Stops playing and releases the audio context. */
  async close(): Promise<void> {
    this.#node?.disconnect();
    await this.context.close().catch(() => undefined);
  }
}
