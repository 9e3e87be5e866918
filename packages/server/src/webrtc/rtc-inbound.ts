/**
 * A connection's inbound WebRTC tracks: which sendonly transceiver (`mid`) of the client's offer
 * carries which inbound track of the schema (from its `publish` with `"transport":"webrtc"`),
 * and, once the offer is applied, one intake per track ({@link RtcVideoIntake},
 * {@link RtcAudioIntake}) fed from the transceiver's RTP, with key frame requests sent back as
 * RTCP PLI. An intake lives as long as its transceiver's track: a renegotiation that drops it,
 * the peer connection's end, or the client's departure close it, and its counters stay.
 */
import type { Logger } from '@reactor/log';
import type { TrackSchema } from '@reactor/protocol';
import type { ClientHandle } from '@reactor/runtime';
import type * as Werift from 'werift';
import { ServerErrorCode } from '../base/errors.js';
import type { ServerMetrics } from '../base/metrics.js';
import { RtcAudioIntake } from './rtc-audio-intake.js';
import { rtcInboundCodec } from './rtc-decoders.js';
import type { RtcIntakeErrorCode, RtcIntakeInfo, RtcTrackIntakeContext } from './rtc-intake-report.js';
import { RtcVideoIntake } from './rtc-video-intake.js';

/** What the inbound side needs from its connection. */
export interface RtcInboundContext {
  /** `schema.tracks`. */
  readonly tracks: readonly TrackSchema[];
  readonly metrics: ServerMetrics;
  readonly logger: Logger;
  /** The client's handle (undefined before it is registered with the host). */
  handle(): ClientHandle | undefined;
  sendError(code: RtcIntakeErrorCode | typeof ServerErrorCode.RtcNoCodec, message: string): void;
}

type Intake = RtcVideoIntake | RtcAudioIntake;

interface Attached {
  readonly schema: TrackSchema;
  readonly transceiver: Werift.RTCRtpTransceiver;
  intake?: Intake;
  /** Set while the intake is being created (the decoder module loads once per process). */
  creating?: Promise<Intake | undefined>;
  /** Unsubscribes from the track's RTP. */
  unsubscribe?: () => void;
}

/** One connection's inbound WebRTC tracks (see the module comment). */
export class RtcInbound {
  readonly #c: RtcInboundContext;
  /** `mid` -> inbound track name, from `publish` messages. */
  readonly #claims = new Map<string, string>();
  /** By `mid`: the transceivers of the applied offer that carry an inbound track. */
  readonly #attached = new Map<string, Attached>();
  /** Counters of intakes that were closed, by track, kept for `info()`. */
  readonly #past = new Map<string, RtcIntakeInfo>();
  #closed = false;

  constructor(c: RtcInboundContext) {
    this.#c = c;
  }

  /** A `publish` with `"transport":"webrtc"` was accepted: `mid` carries `track` (a later claim of the track moves it). */
  claim(track: string, mid: string): void {
    for (const [m, t] of this.#claims) if (t === track) this.#claims.delete(m);
    this.#claims.set(mid, track);
  }

  /** The inbound track the client said `mid` carries, if any. */
  trackFor(mid: string): TrackSchema | undefined {
    const name = this.#claims.get(mid);
    return name === undefined ? undefined : this.#c.tracks.find((t) => t.name === name && t.direction === 'in');
  }

  /**
   * An offer was applied: `transceivers` are the recvonly ones of inbound tracks (by mid). New
   * ones get an intake once their track's first RTP arrives; ones gone from the offer are closed.
   */
  attach(transceivers: readonly { mid: string; schema: TrackSchema; transceiver: Werift.RTCRtpTransceiver }[]): void {
    if (this.#closed) return;
    const keep = new Set(transceivers.map((t) => t.mid));
    for (const [mid, a] of this.#attached) if (!keep.has(mid)) this.#detach(mid, a);
    for (const t of transceivers) {
      const old = this.#attached.get(t.mid);
      if (old && old.transceiver === t.transceiver && old.schema === t.schema) continue;
      if (old) this.#detach(t.mid, old);
      const a: Attached = { schema: t.schema, transceiver: t.transceiver };
      this.#attached.set(t.mid, a);
      const sub = t.transceiver.onTrack.subscribe((track) => this.#track(a, track));
      a.unsubscribe = () => sub.unSubscribe();
      // werift fires onTrack when the remote description is set, which may have happened already.
      const existing = t.transceiver.receiver.track as Werift.MediaStreamTrack | undefined;
      if (existing) this.#track(a, existing);
    }
  }

  /** Counters per inbound WebRTC track (live intakes and closed ones). */
  info(): Record<string, RtcIntakeInfo> {
    const out: Record<string, RtcIntakeInfo> = Object.fromEntries(this.#past);
    for (const a of this.#attached.values()) if (a.intake) out[a.schema.name] = add(out[a.schema.name], a.intake.info());
    return out;
  }

  /** The peer connection ended (media back on the WebSocket) or the client left: every intake is closed. */
  close(): void {
    for (const [mid, a] of this.#attached) this.#detach(mid, a);
  }

  /** The client left: nothing is attached any more. */
  dispose(): void {
    this.#closed = true;
    this.close();
    this.#claims.clear();
  }

  #track(a: Attached, track: Werift.MediaStreamTrack): void {
    let unsubscribed = false;
    const sub = track.onReceiveRtp.subscribe((rtp) => {
      if (unsubscribed || this.#attached.get(midOf(a)) !== a) return;
      const receivedAt = performance.now();
      if (a.intake) return a.intake.receiveRtp(rtp, receivedAt);
      // First packet: the intake is made for the codec the sender picked (its payload type).
      a.creating ??= this.#create(a, rtp.header.payloadType, track);
      void a.creating.then((intake) => intake?.receiveRtp(rtp, receivedAt));
    });
    const prev = a.unsubscribe;
    a.unsubscribe = () => {
      unsubscribed = true;
      sub.unSubscribe();
      prev?.();
    };
  }

  async #create(a: Attached, payloadType: number, track: Werift.MediaStreamTrack): Promise<Intake | undefined> {
    const handle = this.#c.handle();
    const codec = a.transceiver.codecs.find((c) => c.payloadType === payloadType) ?? track.codec;
    const name = codec ? rtcInboundCodec(codec.mimeType) : undefined;
    const schema = a.schema;
    if (!handle || !codec || !name || (schema.kind === 'video') !== (name !== 'opus')) {
      this.#c.sendError(
        ServerErrorCode.RtcNoCodec,
        `track "${schema.name}" arrives as ${codec?.mimeType ?? `payload type ${payloadType}`}, which the server does not decode for a ${schema.kind} track; send ${schema.kind === 'video' ? 'VP8 or H.264' : 'Opus'}`,
      );
      return undefined;
    }
    const ctx: RtcTrackIntakeContext = {
      schema,
      handle,
      metrics: this.#c.metrics,
      logger: this.#c.logger,
      sendError: (code, message) => this.#c.sendError(code, message),
      requestKeyFrame: () => {
        if (track.ssrc !== undefined) a.transceiver.receiver.sendRtcpPLI(track.ssrc).catch(() => undefined);
      },
    };
    try {
      const intake = name === 'opus' ? await RtcAudioIntake.create(ctx, codec.clockRate) : await RtcVideoIntake.create(ctx, name, codec.clockRate);
      // Detached while it loaded.
      if (this.#attached.get(midOf(a)) !== a) {
        intake.close();
        return undefined;
      }
      a.intake = intake;
      return intake;
    } catch (err) {
      this.#c.sendError(ServerErrorCode.UndecodableFrame, (err as Error).message);
      return undefined;
    }
  }

  #detach(mid: string, a: Attached): void {
    this.#attached.delete(mid);
    a.unsubscribe?.();
    if (a.intake) {
      a.intake.close();
      this.#past.set(a.schema.name, add(this.#past.get(a.schema.name), a.intake.info()));
    }
  }
}

function midOf(a: Attached): string {
  return a.transceiver.mid ?? '';
}

function add(a: RtcIntakeInfo | undefined, b: RtcIntakeInfo): RtcIntakeInfo {
  if (!a) return { ...b };
  return {
    received: a.received + b.received,
    accepted: a.accepted + b.accepted,
    dropped: a.dropped + b.dropped,
    keyFramesRequested: a.keyFramesRequested + b.keyFramesRequested,
    pending: a.pending + b.pending,
  };
}
