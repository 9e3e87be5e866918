/**
 * A connection's coded video in the browser: picks the codec, decodes every outbound video track
 * (a {@link VideoTrackDecoder} each), asks for key frames, and moves between the server's tiers
 * (a {@link TierController}). DOM only (exported as `@reactor/client/browser`).
 */
import { TypedEmitter } from '../base/emitter.js';
import { TierController, type TierControllerOptions, type TierDecision, type TierWindow } from './tier-controller.js';
import { VideoTrackDecoder, pickVideoCodec, type DecodedVideoInfo, type VideoDecoderCounters } from './video-decoder.js';
import type { ReferenceLoss } from './key-frame-gate.js';
import type {
  AppSchema,
  DecodedFrame,
  FlushMessage,
  StatsMessage,
  VideoCodecName,
  VideoConfigMessage,
  VideoOffer,
  VideoSelection,
  WelcomeMessage,
} from '../base/protocol.js';

/** What a receiver needs of a client: a `ReactorClient` is one. */
export interface VideoReceiverClient {
  readonly schema: AppSchema;
  on(type: 'frame', listener: (f: DecodedFrame & { trackName: string; receivedAt: number }) => void): () => void;
  on(type: 'audio', listener: (a: { seq: number }) => void): () => void;
  on(type: 'video_config', listener: (m: VideoConfigMessage) => void): () => void;
  on(type: 'flush', listener: (m: FlushMessage) => void): () => void;
  on(type: 'stats', listener: (m: StatsMessage) => void): () => void;
  on(type: 'welcome', listener: (m: WelcomeMessage) => void): () => void;
  /** Sends `select_video` and resolves with the server's reply. */
  selectVideo(codec: VideoCodecName, tier?: string): Promise<VideoSelection>;
  /** Sends `request_key_frame` for an outbound video track. */
  requestKeyFrame(track: string): void;
}

/** Options of a {@link VideoReceiver}. */
export interface VideoReceiverOptions {
  /** Codecs this page may use, preferred first (default: the server's order). `jpeg` alone turns coded video off. */
  codecs?: VideoCodecName[];
  /** The tier to start at (default: the ladder's first). */
  tier?: string;
  /** Move between tiers by the measured reception (default true). */
  adaptive?: boolean;
  /** Tuning of the tier policy. */
  tierOptions?: TierControllerOptions;
  /** Coded frames queued in a decoder beyond which it skips to the next key frame (default 10). */
  maxDecodeQueue?: number;
  /** How often the tier policy is evaluated, ms (default 250). */
  tickMs?: number;
}

/** Events of a {@link VideoReceiver}. */
export interface VideoReceiverEvents {
  /** A decoded picture of any outbound video track; valid only while the listeners run (closed right after). */
  frame: { frame: VideoFrame; info: DecodedVideoInfo };
  /** A track's `video_config` arrived (new codec or tier). */
  config: VideoConfigMessage;
  /** The connection's selection changed (`select_video` answered). */
  selection: VideoSelection;
  /** The tier policy moved (the `select_video` for it is on its way). */
  tier: TierDecision;
  /** A key frame was asked for. */
  keyframe_request: { track: string; reason: ReferenceLoss };
  /** A decode, selection or configuration problem (the stream goes on: the next key frame, or JPEG). */
  error: Error;
  /** This browser refused a track's coded configuration: the receiver selected JPEG for the connection. */
  fallback: { track: string; codec: VideoCodecName; codecString: string };
}

/**
 * Receives a connection's outbound video in the codec it picks from the server's offer: once the
 * offer is known ({@link start}), it selects the best codec this browser decodes (`jpeg` when
 * none: nothing is sent, the server streams JPEG as before), decodes each video track, and moves
 * between tiers. Every picture comes out of the `frame` event as a `VideoFrame`, closed after the
 * listeners. On a re-join (`welcome`) it selects again; on `flush` each decoder waits for a key
 * frame.
 *
 * @example
 * const rx = new VideoReceiver(client);
 * rx.on('frame', ({ frame, info }) => info.track === 'main' && ctx.drawImage(frame, 0, 0));
 * await rx.start(welcome.video);
 */
export class VideoReceiver extends TypedEmitter<VideoReceiverEvents> {
  readonly #client: VideoReceiverClient;
  readonly #options: VideoReceiverOptions;
  readonly #decoders = new Map<string, VideoTrackDecoder>();
  readonly #offs: (() => void)[] = [];
  #offer: VideoOffer | undefined;
  #codec: VideoCodecName = 'jpeg';
  #tierCtl: TierController | undefined;
  #selection: VideoSelection | undefined;
  #selecting = false;
  #timer: ReturnType<typeof setInterval> | undefined;
  /** Highest seq seen on any binary frame of the connection (-1: none yet). */
  #lastSeq = -1;
  /** Holes seen in the connection's seq so far, and its value at each track's last frame. */
  #holes = 0;
  readonly #holesAt = new Map<string, number>();
  #closed = false;
  /** Latest `stats.video` from the server. */
  #serverVideo: StatsMessage['video'];
  /** Bumped by every (re)start: an answer to an older selection is ignored. */
  #generation = 0;

  constructor(client: VideoReceiverClient, options: VideoReceiverOptions = {}) {
    super();
    this.#client = client;
    this.#options = options;
    this.#offs.push(
      client.on('frame', (f) => this.#onFrame(f)),
      client.on('audio', (a) => this.#seen(a.seq)),
      client.on('video_config', (m) => this.#onConfig(m)),
      client.on('flush', (m) => {
        for (const d of this.#decoders.values()) d.flush(m.nextSeq);
        this.#lastSeq = Math.max(this.#lastSeq, m.nextSeq - 1);
      }),
      client.on('stats', (s) => {
        this.#serverVideo = s.video;
        this.#tierCtl?.stats(s);
      }),
      client.on('welcome', (w) => {
        // A new connection streams JPEG until it selects again.
        for (const d of this.#decoders.values()) d.reset();
        this.#lastSeq = -1;
        this.#holesAt.clear();
        this.#selection = undefined;
        void this.start(w.video);
      }),
    );
  }

  /** The codec in use (`jpeg` until a coded one is selected). */
  get codec(): VideoCodecName {
    return this.#selection?.codec ?? 'jpeg';
  }

  /** The tier in use (undefined while JPEG). */
  get tier(): string | undefined {
    return this.#selection?.tier;
  }

  /** The last measurement window of the tier policy (received bitrate, fps, loss, lateness). */
  get reception(): TierWindow | undefined {
    return this.#tierCtl?.lastWindow;
  }

  /** The server's view of this connection's video (`stats.video`): bitrate sent, key-frame requests. */
  get serverStats(): StatsMessage['video'] {
    return this.#serverVideo;
  }

  /** Counters per track. */
  counters(): Record<string, Readonly<VideoDecoderCounters>> {
    return Object.fromEntries([...this.#decoders].map(([k, d]) => [k, d.counters]));
  }

  /**
   * Picks and selects the codec for `offer` (`welcome.video`; undefined: the server streams JPEG
   * only, nothing is sent). Resolves with the selection, or undefined for JPEG.
   */
  async start(offer: VideoOffer | undefined): Promise<VideoSelection | undefined> {
    const generation = ++this.#generation;
    this.#offer = offer;
    this.#stopTimer();
    this.#tierCtl = undefined;
    if (!offer || this.#closed) return undefined;
    const allowed = this.#options.codecs;
    const offered = allowed ? offer.codecs.filter((c) => allowed.includes(c)) : offer.codecs;
    const codec = await pickVideoCodec(offered.length ? offered : ['jpeg']);
    if (generation !== this.#generation || this.#closed) return undefined;
    this.#codec = codec;
    if (codec === 'jpeg') return undefined;
    const tier = this.#options.tier ?? offer.tiers[0]?.name;
    const selection = await this.#select(codec, tier);
    if (generation !== this.#generation || this.#closed || !selection) return selection;
    if (this.#options.adaptive !== false && offer.tiers.length > 1) {
      this.#tierCtl = new TierController(offer.tiers, selection.tier, this.#options.tierOptions);
      this.#timer = setInterval(() => this.#tick(), this.#options.tickMs ?? 250);
    }
    return selection;
  }

  /** Stops decoding: closes every decoder and the tier timer, leaves the client's listeners. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#stopTimer();
    for (const off of this.#offs.splice(0)) off();
    for (const d of this.#decoders.values()) d.close();
    this.#decoders.clear();
    this.removeAllListeners();
  }

  async #select(codec: VideoCodecName, tier: string | undefined): Promise<VideoSelection | undefined> {
    this.#selecting = true;
    try {
      const s = await this.#client.selectVideo(codec, tier);
      if (this.#closed) return undefined;
      this.#selection = s;
      this.emit('selection', s);
      return s;
    } catch (err) {
      this.emit('error', new Error(`select_video ${codec}${tier ? ` (tier ${tier})` : ''} failed: ${(err as Error).message}`, { cause: err }));
      return undefined;
    } finally {
      this.#selecting = false;
    }
  }

  #tick(): void {
    const ctl = this.#tierCtl;
    if (!ctl || this.#selecting || this.#codec === 'jpeg') return;
    const d = ctl.tick();
    if (!d) return;
    this.emit('tier', d);
    const generation = this.#generation;
    void this.#select(this.#codec, d.tier).then((s) => {
      // Refused or superseded: follow what the server really sends.
      if (generation === this.#generation && s === undefined && this.#selection) ctl.setTier(this.#selection.tier);
    });
  }

  #stopTimer(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /**
   * Records a seq of the connection (session-wide, across tracks and audio): a seq skipped is a
   * frame that did not arrive, of some track.
   */
  #seen(seq: number): void {
    if (this.#lastSeq >= 0 && seq > this.#lastSeq + 1) this.#holes++;
    if (seq > this.#lastSeq) this.#lastSeq = seq;
  }

  /** True when a hole appeared since `track`'s previous frame: the frame missing may be one of its. */
  #gapBefore(track: string): boolean {
    const at = this.#holesAt.get(track);
    this.#holesAt.set(track, this.#holes);
    return at !== undefined && at !== this.#holes;
  }

  #decoder(track: string): VideoTrackDecoder {
    let d = this.#decoders.get(track);
    if (!d) {
      d = new VideoTrackDecoder(track, this.#options.maxDecodeQueue === undefined ? {} : { maxQueue: this.#options.maxDecodeQueue });
      d.on('frame', (v) => this.emit('frame', v));
      d.on('error', (e) => this.emit('error', e));
      d.on('unsupported', (u) => this.#fallBack(u));
      d.on('keyframe_needed', (k) => {
        try {
          this.#client.requestKeyFrame(k.track);
        } catch {
          // not connected: the re-join's selection starts with a key frame anyway
          return;
        }
        this.emit('keyframe_request', k);
      });
      this.#decoders.set(track, d);
    }
    return d;
  }

  /** A track's configuration was refused here: JPEG for the connection, as when the server's encoder fails. */
  #fallBack(u: VideoReceiverEvents['fallback']): void {
    if (this.#closed || this.#codec === 'jpeg') return;
    this.#codec = 'jpeg';
    this.#stopTimer();
    this.#tierCtl = undefined;
    this.emit('fallback', u);
    void this.#select('jpeg', undefined);
  }

  #onConfig(m: VideoConfigMessage): void {
    if (this.#closed) return;
    this.#decoder(m.track).configure(m);
    if (m.track === this.#clockTrack()) this.#tierCtl?.setTier(m.tier);
    if (m.codec === 'jpeg' && this.#selection && this.#selection.codec !== 'jpeg') {
      // The server fell back (its encoder failed): stop adapting a codec that is not sent.
      this.#selection = { codec: 'jpeg', tier: m.tier };
      this.#codec = 'jpeg';
      this.#stopTimer();
    }
    this.emit('config', m);
  }

  /** The first outbound video track: the one whose frames the tier policy counts. */
  #clockTrack(): string | undefined {
    return this.#client.schema.tracks.find((t) => t.direction !== 'in' && t.kind !== 'audio')?.name;
  }

  #onFrame(f: DecodedFrame & { trackName: string; receivedAt: number }): void {
    this.#seen(f.seq);
    if (this.#closed) return;
    const schema = this.#client.schema.tracks[f.track];
    if (schema && (schema.direction === 'in' || schema.kind === 'audio')) return;
    const gap = this.#gapBefore(f.trackName);
    if (f.trackName === this.#clockTrack()) this.#tierCtl?.frame(f.payload.byteLength, f.receivedAt, f.ptsMs);
    this.#decoder(f.trackName).decode(f, gap);
  }
}
