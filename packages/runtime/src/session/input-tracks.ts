/**
 * The app's inbound tracks: one `InputBuffer` per track for the host's life, who publishes each
 * track in the session (first publisher wins), the `@trackPublished` / `@trackUnpublished`
 * hooks, and the frames a transport pushes into the buffers.
 */
import { type ErrorMessage, type ReplyMessage, WireErrorCode } from '@reactor/protocol';
import type { InputTrackSpec } from '../app/track-specs.js';
import { InputBuffer } from '../input/input-buffer.js';
import { InputFrame } from '../input/input-frame.js';
import { truncateCodePoints } from '../state/field-errors.js';
import { errorReply } from './answers.js';
import type { Control } from './control.js';
import type { HostClient, HostSession } from './host-client.js';
import type { HostCore } from './host-core.js';
import type { InboundFrame } from './transport.js';

/** A host's inbound tracks and their publishers. */
export class InputTracks {
  /** One buffer per inbound track (wire name), for the host's life; reset at every session's end. */
  private readonly buffers: ReadonlyMap<string, InputBuffer>;
  /** Inbound tracks whose malformed frames were already logged (once per track). */
  private readonly badFrameWarned = new Set<string>();
  /** The app's `this.input`: each track's buffer under its property name. */
  readonly input: Readonly<Record<string, InputBuffer>>;

  constructor(
    private readonly core: HostCore,
    private readonly control: Control,
  ) {
    const { def } = core;
    this.buffers = new Map(def.inputTracks.map((t) => [t.name, new InputBuffer({ name: t.name, capacity: t.capacity })]));
    this.input = Object.freeze(Object.fromEntries(def.inputTracks.map((t) => [t.property, this.buffers.get(t.name)!])));
  }

  /** Checks that `track` names an inbound track; the error answer otherwise. */
  private inboundTrackError(id: string, track: string): ErrorMessage | undefined {
    const { def } = this.core;
    if (def.inputTrackByName.has(track)) return undefined;
    const shown = JSON.stringify(truncateCodePoints(String(track)));
    if (def.tracks.some((t) => t.name === track)) {
      return errorReply(
        id,
        WireErrorCode.WrongTrackDirection,
        `track ${shown} is an outbound track (the app streams it); only inbound tracks can be published`,
      );
    }
    const inbound = def.inputTracks.map((t) => t.name);
    return errorReply(id, WireErrorCode.UnknownTrack, `unknown track ${shown}; this app's inbound tracks: ${inbound.join(', ') || '(none)'}`);
  }

  /** First publisher wins for the session; a re-claim, even by the holder, is refused. */
  publish(client: HostClient, id: string, track: string): ReplyMessage | ErrorMessage {
    const bad = this.inboundTrackError(id, track);
    if (bad) return bad;
    const grant = client.info.publish ?? (client.role === 'controller' ? '*' : []);
    if (grant !== '*' && !grant.includes(track)) {
      return client.role === 'controller'
        ? errorReply(
            id,
            WireErrorCode.PublishNotGranted,
            `track "${track}" is not among the tracks your token lets you publish (${grant.join(', ') || 'none'}); ask for a token whose pub claim lists it`,
          )
        : errorReply(
            id,
            WireErrorCode.ForbiddenRole,
            `publish "${track}": your role "${client.role}" may not publish; it takes a controller's token (or one whose pub claim lists the track)`,
          );
    }
    const session = client.session;
    if (!session || session.over || !client.lifecycle.is('joining', 'joined')) {
      return errorReply(id, WireErrorCode.NoSession, 'no session is running; publish once the session status is streaming');
    }
    const holder = session.publishers.get(track);
    if (holder) {
      const who = holder === client ? 'this client already publishes it (unpublish first)' : `client ${holder.id} publishes it`;
      return errorReply(
        id,
        WireErrorCode.PublishRefused,
        `track "${track}" is taken for this session: ${who}; it is free again when its publisher unpublishes or leaves`,
      );
    }
    if (this.core.singleController && client.role === 'controller' && !this.control.steers(client)) {
      const refused = this.control.roleError(client, id, ['controller'], `publish "${track}"`);
      if (refused) return refused;
    }
    session.publishers.set(track, client);
    this.buffers.get(track)!.reset();
    this.core.notifyChange();
    void this.core.task(() => this.announce(session, client, track));
    return { type: 'reply', id };
  }

  unpublish(client: HostClient, id: string, track: string): ReplyMessage | ErrorMessage {
    const bad = this.inboundTrackError(id, track);
    if (bad) return bad;
    const session = client.session;
    if (!session || session.publishers.get(track) !== client) {
      return errorReply(id, WireErrorCode.NotPublisher, `this client does not publish track "${track}"; nothing to unpublish`);
    }
    session.publishers.delete(track);
    this.buffers.get(track)!.close();
    this.core.notifyChange();
    void this.core.task(() => this.unannounce(session, client, track));
    return { type: 'reply', id };
  }

  /** Whether `client` publishes `track` now. */
  publishes(client: HostClient, track: string): boolean {
    return client.session?.publishers.get(track) === client;
  }

  /** `@trackPublished(track, client)`, under the lock, if `client` still holds `track` and the app knows the client. */
  private async announce(session: HostSession, client: HostClient, track: string): Promise<void> {
    if (session.over || session.publishers.get(track) !== client || !client.lifecycle.is('joined') || session.announced.has(track)) return;
    session.announced.set(track, client);
    await this.core.runHooks('trackPublished', undefined, track, client);
  }

  /** `@trackUnpublished(track, client)`, under the lock, once for each `@trackPublished` that ran. */
  async unannounce(session: HostSession, client: HostClient, track: string): Promise<void> {
    if (session.announced.get(track) !== client) return;
    session.announced.delete(track);
    await this.core.runHooks('trackUnpublished', undefined, track, client);
  }

  /** A decoded inbound frame into its track's buffer; dropped (`false`) unless `client` publishes `track` in a live session. */
  pushFrame(client: HostClient, track: string, frame: InboundFrame): boolean {
    const session = client.session;
    if (!session || session.over || session.publishers.get(track) !== client) return false;
    const spec = this.core.def.inputTrackByName.get(track)!;
    const problem = inboundFrameProblem(spec, frame);
    if (problem !== undefined) {
      // The transport checks frames before they get here: this is a transport bug, logged once per track.
      if (!this.badFrameWarned.has(track)) {
        this.badFrameWarned.add(track);
        this.core.logger.warn({ track, client: client.id }, `dropped an inbound frame of track "${track}": ${problem} (further ones are dropped silently)`);
      }
      return false;
    }
    const buffer = this.buffers.get(track)!;
    const evicts = buffer.available === buffer.capacity;
    const accepted = buffer.push(
      new InputFrame({
        data: frame.data,
        // An audio frame's header carries its sample count as `width`: not a frame size.
        width: spec.kind === 'video' ? frame.width : undefined,
        height: spec.kind === 'video' ? frame.height : undefined,
        sampleRate: spec.kind === 'audio' ? spec.sampleRate : undefined,
        ptsMs: frame.ptsMs,
        receivedAtMs: frame.receivedAtMs,
        metadata: frame.metadata,
      }),
    );
    if (!accepted) return false;
    this.core.counters.inputFramesAccepted++;
    if (evicts) this.core.counters.inputFramesEvicted++;
    // Wakes a loop whose step was refused for want of input.
    this.core.notifyChange();
    return true;
  }

  /** Releases every track `client` publishes (it left): their buffers close. */
  releaseTracks(session: HostSession, client: HostClient): void {
    for (const [track, holder] of session.publishers) {
      if (holder !== client) continue;
      session.publishers.delete(track);
      this.buffers.get(track)!.close();
    }
  }

  /** Closes every input buffer: pending reads reject with `BufferClosedError`. */
  private closeBuffers(): void {
    for (const b of this.buffers.values()) b.close();
  }

  /**
   * The session is ending: every track's publisher still connected gets `track_released`, the
   * buffers close (no frame enters any more; `@trackUnpublished` hooks follow with the clients'
   * `@disconnected`), and the tracks are free for the next session.
   */
  releaseAllTracks(session: HostSession, reason: string): void {
    for (const [track, holder] of session.publishers) {
      if (holder.connected) this.core.safe(holder.sink, () => holder.sink.message({ type: 'track_released', track, reason }));
    }
    session.publishers.clear();
    this.closeBuffers();
  }

  /** The session ended: every buffer is empty and open again, for the next session. */
  resetBuffers(): void {
    for (const b of this.buffers.values()) b.reset();
  }
}

/** Why an inbound frame does not fit its track (the transport should have refused it), or undefined. */
function inboundFrameProblem(spec: InputTrackSpec, frame: InboundFrame): string | undefined {
  if (frame === null || typeof frame !== 'object') return 'not a frame object';
  if (spec.kind === 'audio') {
    if (!(frame.data instanceof Int16Array) || frame.data.length === 0) return 'audio data must be a non-empty Int16Array of mono PCM samples';
    if (frame.sampleRate !== undefined && frame.sampleRate !== spec.sampleRate)
      return `sample rate ${frame.sampleRate} Hz, the track's is ${spec.sampleRate} Hz`;
    return undefined;
  }
  const { width, height, data } = frame;
  if (!(data instanceof Uint8Array)) return 'video data must be a Uint8Array of RGB24 bytes';
  if (!Number.isInteger(width) || !Number.isInteger(height) || width! < 1 || height! < 1) return `bad frame size ${String(width)}x${String(height)}`;
  if (width! > spec.maxWidth! || height! > spec.maxHeight!) return `frame ${width}x${height} exceeds the track's limit ${spec.maxWidth}x${spec.maxHeight}`;
  if (data.length !== width! * height! * 3) return `${data.length} bytes for a ${width}x${height} RGB24 frame (needs ${width! * height! * 3})`;
  return undefined;
}
