/**
 * A microphone that comes in over WebRTC: the Opus RTP of one inbound audio track into mono s16
 * PCM at the track's declared `sampleRate`, handed to the app's `InputBuffer` exactly as PCM
 * chunks of the WebSocket's binary intake are (one chunk per Opus packet, 20 ms as browsers send).
 *
 * RTP -> a reorder buffer (`rtp-reorder.ts`; a packet that never comes is skipped) ->
 * `@napi-rs/webcodecs` `AudioDecoder` (Opus, decoded to mono at 48 kHz) -> libsamplerate when
 * the track declares another rate (one streaming converter per track, so chunk edges do not
 * click) -> s16 -> `pushFrame`. Checked as over the WebSocket: publisher, `maxFps` (chunks per
 * second), at most {@link MAX_AUDIO_DECODE_QUEUE} packets decoding.
 */
import type { RtpPacket } from 'werift';
import { ServerErrorCode } from '../base/errors.js';
import {
  OPUS_RATE,
  createResampler,
  floatToS16,
  loadDecoders,
  type NativeAudioData,
  type NativeAudioDecoder,
  type Resampler,
  type WebCodecsDecoding,
} from './rtc-decoders.js';
import { RtcIntakeReport, RtpClock, type RtcIntakeInfo, type RtcTrackIntakeContext } from './rtc-intake-report.js';
import { RtpReorder } from './rtp-reorder.js';

/** Opus packets waiting in the decoder before newer ones are dropped (a second of 20 ms packets: a backstop, not a latency target). */
export const MAX_AUDIO_DECODE_QUEUE = 50;
/** How long a packet that came early waits for a missing audio packet, ms (audio cannot wait long). */
export const AUDIO_REORDER_WAIT_MS = 60;

interface ChunkMeta {
  receivedAtMs: number;
  ptsMs: number;
  decodeStart: number;
}

/** One inbound WebRTC audio track of one client (see the module comment). */
export class RtcAudioIntake {
  readonly #ctx: RtcTrackIntakeContext;
  readonly #wc: WebCodecsDecoding;
  readonly #report: RtcIntakeReport;
  readonly #reorder = new RtpReorder(AUDIO_REORDER_WAIT_MS, 64);
  readonly #clock: RtpClock;
  readonly #resampler: Resampler | undefined;
  readonly #rate: number;
  #decoder: NativeAudioDecoder | undefined;
  readonly #meta = new Map<number, ChunkMeta>();
  #closed = false;

  /** Loads the decoder (and the resampler when the track's rate is not 48 kHz). */
  static async create(ctx: RtcTrackIntakeContext, clockRate = OPUS_RATE): Promise<RtcAudioIntake> {
    const rate = ctx.schema.sampleRate ?? OPUS_RATE;
    const [wc, resampler] = await Promise.all([loadDecoders(), rate === OPUS_RATE ? undefined : createResampler(OPUS_RATE, rate)]);
    return new RtcAudioIntake(ctx, clockRate, wc, resampler, rate);
  }

  private constructor(ctx: RtcTrackIntakeContext, clockRate: number, wc: WebCodecsDecoding, resampler: Resampler | undefined, rate: number) {
    this.#ctx = ctx;
    this.#wc = wc;
    this.#report = new RtcIntakeReport(ctx);
    this.#clock = new RtpClock(clockRate);
    this.#resampler = resampler;
    this.#rate = rate;
    // Opened now: the native decoder's first start takes longer than a packet's interval.
    this.#openDecoder();
  }

  info(): RtcIntakeInfo {
    return { ...this.#report.counts, pending: this.#meta.size };
  }

  /** One RTP packet of the track (after SRTP). */
  receiveRtp(rtp: RtpPacket, receivedAtMs = performance.now()): void {
    if (this.#closed) return;
    for (const out of this.#reorder.push(rtp, receivedAtMs)) {
      if ('lost' in out) {
        // Lost packets are chunks that never came: counted, and the app's buffer simply gets the next one.
        for (let i = 0; i < out.lost; i++) this.#report.received();
        this.#report.drop('packet_loss', out.lost);
      } else {
        this.#packet(out.rtp.payload, out.rtp.header.timestamp, receivedAtMs);
      }
    }
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      if (this.#decoder && this.#decoder.state !== 'closed') this.#decoder.close();
    } catch {
      // Already closed by its error.
    }
    this.#decoder = undefined;
    this.#report.drop('disconnected', this.#meta.size + this.#reorder.held);
    this.#meta.clear();
    this.#resampler?.destroy();
  }

  #packet(payload: Buffer, timestamp: number, receivedAtMs: number): void {
    const report = this.#report;
    const schema = this.#ctx.schema;
    report.received();
    if (!this.#ctx.handle.publishes(schema.name)) {
      return report.refuse(
        ServerErrorCode.NotPublisher,
        `this client sends audio on its WebRTC track for "${schema.name}" but does not publish it; send {"type":"publish","id":"1","track":"${schema.name}","transport":"webrtc","mid":"<the transceiver's mid>"} first`,
      );
    }
    const micros = this.#clock.micros(timestamp, receivedAtMs);
    if (!report.takeToken(this.#clock.ptsMs(micros), receivedAtMs)) {
      return report.refuse(
        ServerErrorCode.FrameRateLimited,
        `more than ${schema.maxFps} audio packets per second on track "${schema.name}" (its maxFps); the extra ones are dropped: send 10 ms packets or longer`,
      );
    }
    const decoder = this.#decoder ?? this.#openDecoder();
    const queued = decoder.decodeQueueSize;
    if (queued >= MAX_AUDIO_DECODE_QUEUE) {
      return report.refuse(
        ServerErrorCode.FrameRateLimited,
        `the server is still decoding ${queued} earlier audio packets of track "${schema.name}"; this one is dropped`,
        'decode_backlog',
      );
    }
    this.#meta.set(micros, { receivedAtMs, ptsMs: this.#clock.ptsMs(micros), decodeStart: performance.now() });
    try {
      decoder.decode(new this.#wc.EncodedAudioChunk({ type: 'key', timestamp: micros, data: payload }));
    } catch (err) {
      this.#failed(err as Error);
    }
  }

  #openDecoder(): NativeAudioDecoder {
    const decoder = new this.#wc.AudioDecoder({
      output: (data) => this.#decoded(data),
      error: (err) => {
        if (this.#decoder === decoder) this.#failed(err);
      },
    });
    decoder.configure({ codec: 'opus', sampleRate: OPUS_RATE, numberOfChannels: 1 });
    this.#decoder = decoder;
    return decoder;
  }

  /** The decoder failed: the packets it held are dropped; the next packet opens a new one. */
  #failed(err: Error): void {
    const d = this.#decoder;
    this.#decoder = undefined;
    try {
      if (d && d.state !== 'closed') d.close();
    } catch {
      // Closed by its error.
    }
    const held = this.#meta.size;
    this.#meta.clear();
    if (held > 1) this.#report.drop(ServerErrorCode.UndecodableFrame, held - 1);
    this.#report.refuse(
      ServerErrorCode.UndecodableFrame,
      `an Opus packet of track "${this.#ctx.schema.name}" cannot be decoded (${(err?.message ?? String(err)).slice(0, 200)})`,
    );
  }

  #decoded(data: NativeAudioData): void {
    const meta = this.#meta.get(data.timestamp);
    this.#meta.delete(data.timestamp);
    try {
      if (this.#closed || !meta) return;
      this.#ctx.metrics.inputDecodeSeconds.observe((performance.now() - meta.decodeStart) / 1000);
      const mono = mixDown(data);
      const samples = this.#resampler ? this.#resampler.push(mono) : mono;
      // The resampler's filter delay: its first output may be empty.
      if (samples.length === 0) return;
      this.#report.deliver({ data: floatToS16(samples), sampleRate: this.#rate, ptsMs: meta.ptsMs, receivedAtMs: meta.receivedAtMs });
    } finally {
      data.close();
    }
  }
}

/** The decoded samples as one float channel (the mean of the channels when there are several). */
function mixDown(data: NativeAudioData): Float32Array {
  const n = data.numberOfFrames;
  const out = new Float32Array(n);
  data.copyTo(out, { planeIndex: 0, format: 'f32-planar' });
  if (data.numberOfChannels === 1) return out;
  const plane = new Float32Array(n);
  for (let c = 1; c < data.numberOfChannels; c++) {
    data.copyTo(plane, { planeIndex: c, format: 'f32-planar' });
    for (let i = 0; i < n; i++) out[i]! += plane[i]!;
  }
  for (let i = 0; i < n; i++) out[i]! /= data.numberOfChannels;
  return out;
}
