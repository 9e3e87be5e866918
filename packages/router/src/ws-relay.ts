/**
 * What the router's WebSocket relay needs of RFC 6455 without decoding payloads: where frames
 * begin and end in each direction (so a ping can be put between two of the client's frames and a
 * close frame between two of the instance's), the ping itself, and the handshake to accept a
 * socket only to close it with a reason a browser can read (a refused upgrade's HTTP status is
 * invisible to a page's `WebSocket`).
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Duplex } from 'node:stream';

/**
 * Follows the frame boundaries of one direction of a WebSocket byte stream. {@link push} takes
 * each chunk and returns the offsets in it where a frame ends (at which bytes of another frame
 * may be put). Control frames may come between the fragments of a message (RFC 6455 5.4).
 */
export class FrameBoundaries {
  /** Payload bytes left of the current frame. */
  #need = 0;
  /** The current frame's header bytes so far, while it is incomplete. */
  #header: number[] = [];
  #closed = false;

  /** Whether a close frame (opcode 8) has begun in this direction: the peer closed the WebSocket itself. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Whether the stream is between two frames now. */
  get atBoundary(): boolean {
    return this.#need === 0 && this.#header.length === 0;
  }

  /** Offsets in `chunk` just after each frame that ends in it. */
  push(chunk: Buffer): number[] {
    const ends: number[] = [];
    let i = 0;
    while (i < chunk.length) {
      if (this.#need > 0) {
        const take = Math.min(this.#need, chunk.length - i);
        this.#need -= take;
        i += take;
        if (this.#need === 0) ends.push(i);
        continue;
      }
      this.#header.push(chunk[i]!);
      i++;
      const length = headerLength(this.#header);
      if (length === undefined || this.#header.length < length) continue;
      if ((this.#header[0]! & 0x0f) === 0x8) this.#closed = true;
      const payload = payloadLength(this.#header);
      this.#header = [];
      this.#need = payload;
      if (payload === 0) ends.push(i);
    }
    return ends;
  }
}

/** The header's full length once its first two bytes are known. */
function headerLength(h: number[]): number | undefined {
  if (h.length < 2) return undefined;
  const len7 = h[1]! & 0x7f;
  const masked = (h[1]! & 0x80) !== 0;
  return 2 + (len7 === 126 ? 2 : len7 === 127 ? 8 : 0) + (masked ? 4 : 0);
}

function payloadLength(h: number[]): number {
  const len7 = h[1]! & 0x7f;
  if (len7 === 126) return (h[2]! << 8) | h[3]!;
  if (len7 === 127) {
    let n = 0;
    for (let k = 2; k < 10; k++) n = n * 256 + h[k]!;
    return n;
  }
  return len7;
}

/** An empty ping as a client sends it (masked, as RFC 6455 requires of client frames). */
export function clientPingFrame(): Buffer {
  return Buffer.concat([Buffer.from([0x89, 0x80]), randomBytes(4)]);
}

/** A close frame as a server sends it (unmasked): `code` and a reason cut to the 123 bytes allowed. */
export function serverCloseFrame(code: number, reason: string): Buffer {
  let text = Buffer.from(reason);
  if (text.length > 123) text = text.subarray(0, 120);
  const payload = Buffer.alloc(2 + text.length);
  payload.writeUInt16BE(code, 0);
  text.copy(payload, 2);
  return Buffer.concat([Buffer.from([0x88, payload.length]), payload]);
}

/** Close codes the router uses on a socket it accepted only to say why it cannot relay it. */
export const RouterCloseCode = {
  /** `unknown_instance`: the path names no instance holding a session. */
  UnknownInstance: 4404,
  /** `instance_unreachable`: the instance did not accept the connection, or stopped answering. */
  InstanceUnreachable: 4502,
  /** `session_moved`: the session moved to another instance; the reason names it (`session_moved: /s/{instance}`). */
  SessionMoved: 4307,
} as const;

/**
 * Completes the upgrade of `req` (its `Sec-WebSocket-Key`) and closes the socket at once with
 * `code` and the reason `<error code>: <message>`. Returns false, writing nothing, when the
 * request is no valid WebSocket upgrade (the caller answers it with an HTTP status instead).
 */
export function acceptAndClose(socket: Duplex, key: string | undefined, code: number, reason: string): boolean {
  if (!key || !/^[A-Za-z0-9+/]{22}==$/.test(key)) return false;
  const accept = createHash('sha1').update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
  socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
  socket.end(serverCloseFrame(code, reason));
  // Read (and drop) the client's answering close frame, so its FIN is seen and the socket ends; destroy it if the client stays.
  socket.resume();
  setTimeout(() => socket.destroy(), 2000).unref();
  return true;
}

/** The end of an HTTP response head in `buf`, or -1. */
export function headEnd(buf: Buffer): number {
  const i = buf.indexOf('\r\n\r\n');
  return i < 0 ? -1 : i + 4;
}
