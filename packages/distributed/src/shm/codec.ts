/**
 * Message layout in a shared-memory segment, and the codec that puts values there. This module
 * is the only place that does offset arithmetic on a message.
 *
 * ```
 * offset 0                u32 LE   header length H
 * offset 4                H bytes  v8-serialized value; every typed array in it is a host
 *                                  object {type index, offset, length} instead of its bytes
 * offset align64(4 + H)            payload region: each typed array's bytes, each at a
 *                                  64-byte-aligned offset relative to the region's start
 * ```
 *
 * Decoding returns typed arrays that are views into the bytes given to {@link decodeMessage}:
 * zero copies. Values are anything the structured-clone algorithm accepts.
 * @internal
 */
import { Buffer } from 'node:buffer';
import v8 from 'node:v8';

/** Bytes before the header: its length as a little-endian u32. */
export const HEADER_LENGTH_BYTES = 4;
/** Alignment of the payload region and of every array in it (a cache line; enough for Float64Array). */
export const PAYLOAD_ALIGN = 64;

export function align(n: number, to = PAYLOAD_ALIGN): number {
  return Math.ceil(n / to) * to;
}

type ViewCtor = new (buffer: ArrayBufferLike, byteOffset: number, length: number) => ArrayBufferView;

/** Type index on the wire -> constructor. Index 12 is a Node Buffer (revived as Buffer). */
const VIEW_TYPES: ViewCtor[] = [
  Int8Array,
  Uint8Array,
  Uint8ClampedArray,
  Int16Array,
  Uint16Array,
  Int32Array,
  Uint32Array,
  Float32Array,
  Float64Array,
  BigInt64Array,
  BigUint64Array,
  DataView as unknown as ViewCtor,
];
const BUFFER_TYPE = 12;

function typeIndexOf(view: ArrayBufferView): number {
  if (Buffer.isBuffer(view)) return BUFFER_TYPE;
  for (let i = 0; i < VIEW_TYPES.length; i++) {
    if (view.constructor === VIEW_TYPES[i]) return i;
  }
  // Subclasses of typed arrays travel as their base type.
  for (let i = 0; i < VIEW_TYPES.length; i++) {
    if (view instanceof (VIEW_TYPES[i] as unknown as { prototype: object; [Symbol.hasInstance](v: unknown): boolean })) return i;
  }
  throw new TypeError(`Cannot send a ${view.constructor.name} between processes.`);
}

/** A value ready to be written: the serialized header plus the arrays whose bytes follow it. */
export interface EncodedMessage {
  header: Uint8Array;
  views: ArrayBufferView[];
  /** Offset of each view's bytes relative to the payload region. */
  offsets: number[];
  /** Offset of the payload region from the message start. */
  payloadStart: number;
  /** Bytes of the whole message. */
  totalBytes: number;
}

class PayloadSerializer extends v8.Serializer {
  views: ArrayBufferView[] = [];
  offsets: number[] = [];
  cursor = 0;

  constructor() {
    super();
    // Not in @types/node, but public since Node 8 (DefaultSerializer uses it).
    (this as unknown as { _setTreatArrayBufferViewsAsHostObjects(flag: boolean): void })._setTreatArrayBufferViewsAsHostObjects(true);
  }

  _writeHostObject(object: object): void {
    if (!ArrayBuffer.isView(object)) {
      throw new TypeError(`Cannot send a ${(object as { constructor?: { name?: string } }).constructor?.name ?? 'host object'} between processes.`);
    }
    const view = object;
    const type = typeIndexOf(view);
    const length = type === 11 || type === BUFFER_TYPE ? view.byteLength : (view as unknown as { length: number }).length;
    this.writeUint32(type);
    this.writeDouble(this.cursor);
    this.writeDouble(length);
    this.views.push(view);
    this.offsets.push(this.cursor);
    this.cursor = align(this.cursor + view.byteLength);
  }
}

class PayloadDeserializer extends v8.Deserializer {
  constructor(
    header: Uint8Array,
    private readonly region: ArrayBufferLike,
    private readonly regionOffset: number,
  ) {
    super(header);
  }

  _readHostObject(): unknown {
    const type = this.readUint32();
    const offset = this.readDouble();
    const length = this.readDouble();
    const at = this.regionOffset + offset;
    if (type === BUFFER_TYPE) return Buffer.from(this.region as ArrayBuffer, at, length);
    const Ctor = VIEW_TYPES[type];
    if (!Ctor) throw new TypeError(`Unknown typed array type ${type} in a shared-memory message.`);
    return new Ctor(this.region, at, length);
  }
}

/**
 * Serializes `value`. Typed arrays are not copied here: their bytes are copied once, by
 * {@link writeMessage}, straight into the destination.
 * @throws DataCloneError (a `DOMException`/`Error`) when `value` holds something that cannot be cloned
 */
export function encodeMessage(value: unknown): EncodedMessage {
  const s = new PayloadSerializer();
  s.writeHeader();
  s.writeValue(value);
  const header = s.releaseBuffer();
  const payloadStart = align(HEADER_LENGTH_BYTES + header.byteLength);
  return { header, views: s.views, offsets: s.offsets, payloadStart, totalBytes: payloadStart + s.cursor };
}

/** Copies an encoded message into `target` (which must hold `msg.totalBytes`). */
export function writeMessage(target: Uint8Array, msg: EncodedMessage): void {
  new DataView(target.buffer, target.byteOffset, HEADER_LENGTH_BYTES).setUint32(0, msg.header.byteLength, true);
  target.set(msg.header, HEADER_LENGTH_BYTES);
  for (let i = 0; i < msg.views.length; i++) {
    const v = msg.views[i]!;
    target.set(new Uint8Array(v.buffer, v.byteOffset, v.byteLength), msg.payloadStart + msg.offsets[i]!);
  }
}

/**
 * The pieces of a message with their absolute offsets, for writers that cannot map memory
 * (the file fallback writes each piece with one `pwrite`).
 */
export function messagePieces(msg: EncodedMessage): { bytes: Uint8Array; at: number }[] {
  const len = new Uint8Array(HEADER_LENGTH_BYTES);
  new DataView(len.buffer).setUint32(0, msg.header.byteLength, true);
  const pieces = [
    { bytes: len, at: 0 },
    { bytes: msg.header, at: HEADER_LENGTH_BYTES },
  ];
  for (let i = 0; i < msg.views.length; i++) {
    const v = msg.views[i]!;
    pieces.push({ bytes: new Uint8Array(v.buffer, v.byteOffset, v.byteLength), at: msg.payloadStart + msg.offsets[i]! });
  }
  return pieces;
}

/**
 * Decodes a message. Typed arrays in the result are views into `bytes` (no copy): they stay
 * valid exactly as long as `bytes` holds this message.
 */
export function decodeMessage(bytes: Uint8Array): unknown {
  if (bytes.byteOffset % 8 !== 0) throw new RangeError('A shared-memory message must start 8-byte aligned.');
  const headerLength = new DataView(bytes.buffer, bytes.byteOffset, HEADER_LENGTH_BYTES).getUint32(0, true);
  const header = bytes.subarray(HEADER_LENGTH_BYTES, HEADER_LENGTH_BYTES + headerLength);
  const d = new PayloadDeserializer(header, bytes.buffer, bytes.byteOffset + align(HEADER_LENGTH_BYTES + headerLength));
  d.readHeader();
  return d.readValue();
}
