/**
 * A coded frame's message on the WebSocket wire: its frame header, then its access unit. Made on
 * the first WebSocket client's send and the same buffer for every later one (a WeakMap keyed by
 * the frame the shared encoder made, so nothing is retained); the other media paths never pay
 * for it.
 */
import { encodeFrameHeader } from '@reactor/protocol';
import type { CodedFrame } from '../video/video-streams.js';

const wireOf = new WeakMap<CodedFrame, Buffer>();

/** The binary wire message of `frame` (header + access unit), made once for every WebSocket client. */
export function codedWireMessage(frame: CodedFrame): Buffer {
  let bytes = wireOf.get(frame);
  if (!bytes) {
    const header = encodeFrameHeader(frame.header);
    bytes = Buffer.allocUnsafe(header.byteLength + frame.data.byteLength);
    bytes.set(header, 0);
    bytes.set(frame.data, header.byteLength);
    wireOf.set(frame, bytes);
  }
  return bytes;
}
