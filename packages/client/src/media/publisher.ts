/**
 * A client's publications: the live one of each inbound track, the transport they send on (with
 * the frame sequence numbers of the connection), the checks before `publish`, and the server's
 * frame errors routed to the publication they are about.
 */
import { ReactorClientError } from '../base/errors.js';
import { Publication, isMediaTrack, type PublishOptions, type PublishSource, type PublishTransport } from './publication.js';
import { WireErrorCode, type AppSchema, type TrackSchema } from '../base/protocol.js';
import { publishOverRtc, publishPeer, type RtcPublishLink, type RtcPublishPath } from './rtc-publish.js';

/** Server error codes about an inbound frame: tied to the publication of the track they name. */
const FRAME_ERROR_CODES: ReadonlySet<string> = new Set([
  WireErrorCode.NotPublisher,
  WireErrorCode.WrongEncoding,
  WireErrorCode.UndecodableFrame,
  WireErrorCode.FrameTooLarge,
  WireErrorCode.FrameRateLimited,
  WireErrorCode.FrameHeaderMismatch,
  WireErrorCode.UnknownTrack,
  WireErrorCode.WrongTrackDirection,
]);

/** The schema entry and index of an inbound track, or a `ReactorClientError` naming the tracks there are. */
export function inboundTrack(app: AppSchema, name: string): { schema: TrackSchema; index: number } {
  const index = app.tracks.findIndex((t) => t.name === name);
  const inbound = app.tracks.filter((t) => t.direction === 'in').map((t) => `"${t.name}" (${t.kind})`);
  const list = inbound.length ? `its inbound tracks are ${inbound.join(', ')}` : 'it has no inbound tracks (declare them on an Input class)';
  const schema = app.tracks[index];
  if (!schema) throw new ReactorClientError(WireErrorCode.UnknownTrack, `the app has no track "${name}"; ${list}`);
  if (schema.direction !== 'in') {
    throw new ReactorClientError(WireErrorCode.WrongTrackDirection, `track "${name}" is an outbound track (the app streams it); ${list}`);
  }
  return { schema, index };
}

/** A `TypeError` when `source` cannot feed inbound track `track` (`schema`): a media track of the other kind, or no source at all. */
export function checkPublishSource(track: string, schema: TrackSchema, source: PublishSource): void {
  if (isMediaTrack(source) && source.kind !== schema.kind) {
    throw new TypeError(
      `source is a${source.kind === 'audio' ? 'n' : ''} ${source.kind} track, but "${track}" is a${schema.kind === 'audio' ? 'n' : ''} ${schema.kind} track`,
    );
  }
  if (!isMediaTrack(source) && (typeof source !== 'object' || source === null || !(Symbol.asyncIterator in source))) {
    throw new TypeError('source must be a MediaStreamTrack or an async iterable of frames (video) or Int16Array chunks (audio)');
  }
}

/** The live publications of one client, by track name. */
export class Publisher {
  readonly #publications = new Map<string, Publication>();
  #frameSeq = 0;
  readonly #publishTransport: PublishTransport;

  /** `link`: the client's socket as its publications use it. */
  constructor(link: Pick<PublishTransport, 'sendBinary' | 'bufferedAmount' | 'unpublish'>) {
    this.#publishTransport = {
      sendBinary: link.sendBinary,
      bufferedAmount: link.bufferedAmount,
      nextSeq: () => (this.#frameSeq = (this.#frameSeq + 1) >>> 0),
      unpublish: link.unpublish,
      forget: (p) => {
        if (this.#publications.get(p.track) === p) this.#publications.delete(p.track);
      },
    };
  }

  /** The live publications, by track name. */
  get publications(): ReadonlyMap<string, Publication> {
    return this.#publications;
  }

  /** A publication the server accepted: it replaces the track's previous one and pumps `source`. */
  start(track: string, schema: TrackSchema, index: number, source: PublishSource, options: PublishOptions): Publication {
    const pub = new Publication(this.#publishTransport, schema, index, options);
    this.#publications.get(track)?.finish({ reason: 'stopped' });
    this.#publications.set(track, pub);
    void pub.pump(source, schema, options);
    return pub;
  }

  /**
   * Publishes `source` on the track `schema`: a browser track over WebRTC when `link` is connected
   * (per `options.transport`, see `rtc-publish.ts`), else frames on the socket. `request` sends the
   * `publish` (with `extra`: its transport and the transceiver's mid).
   * @throws {ReactorClientError} the server's refusal, or `rtc_not_connected` (`transport: 'webrtc'` without a link).
   */
  async publish(
    schema: TrackSchema,
    index: number,
    source: PublishSource,
    options: PublishOptions,
    link: RtcPublishLink | undefined,
    request: (extra?: object) => Promise<void>,
  ): Promise<Publication> {
    const rtc = publishPeer(schema.name, source, options.transport, link);
    if (rtc) return this.startRtc(rtc, schema, index, (mid) => request({ transport: 'webrtc', mid }), options);
    await request();
    return this.start(schema.name, schema, index, source, options);
  }

  /**
   * Publishes a browser track over WebRTC (see `rtc-publish.ts`; `request` sends the `publish`
   * with the transceiver's mid): the publication replaces the track's previous one.
   */
  async startRtc(
    rtc: RtcPublishPath,
    schema: TrackSchema,
    index: number,
    request: (mid: string) => Promise<void>,
    options: PublishOptions,
  ): Promise<Publication> {
    const published = await publishOverRtc(rtc.link, rtc.peer, rtc.track, schema, request);
    const pub = new Publication(this.#publishTransport, schema, index, options);
    this.#publications.get(schema.name)?.finish({ reason: 'stopped' });
    this.#publications.set(schema.name, pub);
    pub.attachRtc(published);
    return pub;
  }

  /** Ends every publication without asking the server (it forgets them with the connection). */
  endAll(reason: 'connection_lost' | 'client_closed'): void {
    for (const p of [...this.#publications.values()]) p.finish({ reason });
  }

  /** A server error: one about an inbound frame goes to the publication of the track it names. */
  reportFrameError(code: string, message: string): void {
    if (FRAME_ERROR_CODES.has(code)) this.#publicationFor(message)?.reportError(new ReactorClientError(code, message));
  }

  /** The publication a frame error is about: the one whose track the message names (`"webcam"`), else the only one. */
  #publicationFor(message: string): Publication | undefined {
    const pubs = [...this.#publications.values()];
    return pubs.find((p) => message.includes(`"${p.track}"`)) ?? (pubs.length === 1 ? pubs[0] : undefined);
  }
}
