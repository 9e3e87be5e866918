/**
 * How values cross the process boundary, and their layout in a shared-memory segment. This
 * module is the only place that does offset arithmetic on a message.
 *
 * Two formats, chosen per value:
 * - **json** (the fast path, for plain objects/arrays/strings/finite numbers/booleans/null and
 *   typed arrays): the structure travels as JSON text inside the small IPC message, each typed
 *   array replaced by a placeholder; the arrays' bytes go to shared memory, each at a 64-byte
 *   aligned offset from the segment start.
 * - **v8** (everything else structured clone accepts: Map, Date, undefined, NaN, cycles...):
 *   the whole message goes to shared memory:
 *   ```
 *   offset 0                u32 LE   header length H
 *   offset 4                H bytes  v8-serialized value; every typed array in it is a host
 *                                    object {type index, offset, length} instead of its bytes
 *   offset align64(4 + H)            each typed array's bytes, at 64-byte-aligned offsets
 *                                    relative to this point
 *   ```
 *
 * Decoding returns typed arrays that are views into the segment's bytes: zero copies.
 * @internal
 */
import { Buffer } from 'node:buffer';
import { createHash } from 'node:crypto';
import v8 from 'node:v8';

/** Bytes before the header: its length as a little-endian u32. */
export const HEADER_LENGTH_BYTES = 4;
/** Alignment of the payload region and of every array in it (a cache line; enough for Float64Array). */
export const PAYLOAD_ALIGN = 64;

export function align(n: number, to = PAYLOAD_ALIGN): number {
  return Math.ceil(n / to) * to;
}

type ViewCtor = new (buffer: ArrayBufferLike, byteOffset: number, length: number) => ArrayBufferView;

/**
 * Type index on the wire -> constructor (the wire table of every view that can travel; the
 * collectives accept a subset, `TYPED_ARRAY_CONSTRUCTORS` in `collectives/types.ts`).
 * {@link DATA_VIEW_TYPE} and {@link BUFFER_TYPE} are measured in bytes, the others in elements.
 */
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
/** Wire type index of a `DataView` (its length is in bytes). */
const DATA_VIEW_TYPE = 11;
/** Wire type index of a Node `Buffer` (revived as a Buffer; its length is in bytes). */
const BUFFER_TYPE = 12;

/** The length a view is described by on the wire: bytes for DataView/Buffer, elements otherwise. */
function wireLength(view: ArrayBufferView, type: number): number {
  return type === DATA_VIEW_TYPE || type === BUFFER_TYPE ? view.byteLength : (view as unknown as { length: number }).length;
}

/**
 * The json format's description of its typed arrays: {@link META_STRIDE} numbers per array,
 * `[type, offset, length]` at {@link META_TYPE}, {@link META_OFFSET}, {@link META_LENGTH}.
 * Only this module reads or writes it (`setMetaOffset()` for the writer that moves an array).
 */
export const META_STRIDE = 3;
const META_TYPE = 0;
const META_OFFSET = 1;
const META_LENGTH = 2;

/** Records that array `index` of a json-format message lies at `offset` in its block. */
export function setMetaOffset(enc: EncodedValue, index: number, offset: number): void {
  enc.offsets[index] = offset;
  enc.meta[index * META_STRIDE + META_OFFSET] = offset;
}

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
    const length = wireLength(view, type);
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
    private readonly copy: boolean,
  ) {
    super(header);
  }

  _readHostObject(): unknown {
    const type = this.readUint32();
    const offset = this.readDouble();
    const length = this.readDouble();
    return viewAt(this.region, this.regionOffset + offset, type, length, this.copy);
  }
}

/** Marks a typed array in json text: `{"\u0000ta": <index into meta>}`. */
const PLACEHOLDER = '\u0000ta';
/** Nesting beyond this (or a cycle) goes through the v8 format. */
const MAX_JSON_DEPTH = 64;

/** A value ready to be sent: JSON text for the IPC message and/or bytes for shared memory. */
export interface EncodedValue {
  /** json format: the value's text; null for the v8 format. */
  json: string | null;
  /** json format: `[type, offset, length]` per typed array (see {@link META_STRIDE}). */
  meta: number[];
  /** v8 format: the serialized header. */
  header: Uint8Array | null;
  /** Offset of the first array's bytes (0 for json, after the header for v8). */
  payloadStart: number;
  views: ArrayBufferView[];
  /** Each view's offset relative to `payloadStart`. */
  offsets: number[];
  /** Bytes that go to shared memory (0: nothing to write). */
  totalBytes: number;
}

class JsonScan {
  views: ArrayBufferView[] = [];
  index = new Map<ArrayBufferView, number>();
  meta: number[] = [];
  offsets: number[] = [];
  cursor = 0;

  /** False when the value needs the v8 format. */
  ok(v: unknown, depth: number): boolean {
    switch (typeof v) {
      case 'string':
      case 'boolean':
        return true;
      case 'number':
        return Number.isFinite(v) && !Object.is(v, -0);
      case 'object': {
        if (v === null) return true;
        if (depth > MAX_JSON_DEPTH) return false;
        if (ArrayBuffer.isView(v)) {
          if (!this.index.has(v)) {
            const type = typeIndexOf(v);
            this.index.set(v, this.views.length);
            this.views.push(v);
            this.offsets.push(this.cursor);
            const entry = [0, 0, 0];
            entry[META_TYPE] = type;
            entry[META_OFFSET] = this.cursor;
            entry[META_LENGTH] = wireLength(v, type);
            this.meta.push(...entry);
            this.cursor = align(this.cursor + v.byteLength);
          }
          return true;
        }
        if (Array.isArray(v)) {
          for (let i = 0; i < v.length; i++) {
            if (!(i in v) || !this.ok(v[i], depth + 1)) return false;
          }
          return true;
        }
        const proto = Object.getPrototypeOf(v) as unknown;
        if (proto !== Object.prototype && proto !== null) return false;
        for (const k in v) {
          if (k.charCodeAt(0) === 0 || !this.ok((v as Record<string, unknown>)[k], depth + 1)) return false;
        }
        return Object.getOwnPropertySymbols(v).length === 0;
      }
      default:
        return false;
    }
  }
}

/**
 * Encodes `value` without copying its typed arrays: their bytes are copied once, by
 * {@link writeMessage}, straight into shared memory.
 * @throws DataCloneError when `value` holds something structured clone refuses (functions, symbols...)
 */
export function encodeValue(value: unknown): EncodedValue {
  const scan = new JsonScan();
  if (scan.ok(value, 0)) {
    const json =
      scan.views.length === 0
        ? JSON.stringify(value)
        : JSON.stringify(value, function (this: Record<string, unknown>, k: string, v: unknown) {
            // The holder's raw value: a Buffer's toJSON() has already run on `v`.
            const raw = this[k];
            return ArrayBuffer.isView(raw) ? { [PLACEHOLDER]: scan.index.get(raw) } : v;
          });
    return { json, meta: scan.meta, header: null, payloadStart: 0, views: scan.views, offsets: scan.offsets, totalBytes: scan.cursor };
  }
  const s = new PayloadSerializer();
  s.writeHeader();
  s.writeValue(value);
  const header = s.releaseBuffer();
  const payloadStart = align(HEADER_LENGTH_BYTES + header.byteLength);
  return { json: null, meta: [], header, payloadStart, views: s.views, offsets: s.offsets, totalBytes: payloadStart + s.cursor };
}

/** Copies an encoded value's shared-memory bytes into `target` (at least `totalBytes` long). */
export function writeMessage(target: Uint8Array, enc: EncodedValue): void {
  if (enc.header) {
    new DataView(target.buffer, target.byteOffset, HEADER_LENGTH_BYTES).setUint32(0, enc.header.byteLength, true);
    target.set(enc.header, HEADER_LENGTH_BYTES);
  }
  for (let i = 0; i < enc.views.length; i++) {
    const v = enc.views[i]!;
    const at = enc.payloadStart + enc.offsets[i]!;
    // An array the writer allocated in this very place (zero-copy result): nothing to copy.
    if (v.buffer === target.buffer && v.byteOffset === target.byteOffset + at) continue;
    target.set(new Uint8Array(v.buffer, v.byteOffset, v.byteLength), at);
  }
}

/** The pieces of the shared-memory bytes with their offsets (the file fallback `pwrite`s each). */
export function messagePieces(enc: EncodedValue): { bytes: Uint8Array; at: number }[] {
  const pieces: { bytes: Uint8Array; at: number }[] = [];
  if (enc.header) {
    const len = new Uint8Array(HEADER_LENGTH_BYTES);
    new DataView(len.buffer).setUint32(0, enc.header.byteLength, true);
    pieces.push({ bytes: len, at: 0 }, { bytes: enc.header, at: HEADER_LENGTH_BYTES });
  }
  for (let i = 0; i < enc.views.length; i++) {
    const v = enc.views[i]!;
    pieces.push({ bytes: new Uint8Array(v.buffer, v.byteOffset, v.byteLength), at: enc.payloadStart + enc.offsets[i]! });
  }
  return pieces;
}

/** A view of `region` (zero-copy), or with `copy` an array of its own holding the same bytes (one copy). */
function viewAt(region: ArrayBufferLike, at: number, type: number, length: number, copy: boolean): ArrayBufferView {
  if (type === BUFFER_TYPE) {
    const view = Buffer.from(region as ArrayBuffer, at, length);
    return copy ? Buffer.from(view) : view;
  }
  const Ctor = VIEW_TYPES[type];
  if (!Ctor) throw new TypeError(`Unknown typed array type ${type} in a shared-memory message.`);
  const view = new Ctor(region, at, length);
  if (!copy) return view;
  if (type === DATA_VIEW_TYPE) return new DataView(new Uint8Array(region, at, length).slice().buffer);
  return (view as unknown as { slice(): ArrayBufferView }).slice();
}

function allEmpty(meta: readonly number[]): boolean {
  for (let i = 0; i < meta.length; i += META_STRIDE) if (meta[i + META_LENGTH] !== 0) return false;
  return true;
}

/**
 * Decodes a value. `bytes` are its shared-memory bytes (null when it has none). Typed arrays in
 * the result are views into `bytes` (they stay valid exactly as long as `bytes` holds this
 * value), or with `copy` arrays of their own (one copy each, the caller owns them).
 */
export function decodeValue(json: string | null, meta: readonly number[], bytes: Uint8Array | null, copy = false): unknown {
  if (json !== null) {
    if (meta.length === 0) return JSON.parse(json) as unknown;
    // A value whose typed arrays are all empty has no shared-memory bytes at all.
    const region = bytes ?? (allEmpty(meta) ? new Uint8Array(0) : null);
    if (!region) throw new RangeError('A message with typed arrays arrived without its shared-memory bytes.');
    if (region.byteOffset % 8 !== 0) throw new RangeError('A shared-memory message must start 8-byte aligned.');
    return JSON.parse(json, (_k, v: unknown) => {
      if (v !== null && typeof v === 'object' && PLACEHOLDER in v) {
        const i = (v as Record<string, number>)[PLACEHOLDER]! * META_STRIDE;
        return viewAt(region.buffer, region.byteOffset + meta[i + META_OFFSET]!, meta[i + META_TYPE]!, meta[i + META_LENGTH]!, copy);
      }
      return v;
    }) as unknown;
  }
  if (!bytes) throw new RangeError('A v8-format message arrived without its shared-memory bytes.');
  if (bytes.byteOffset % 8 !== 0) throw new RangeError('A shared-memory message must start 8-byte aligned.');
  const headerLength = new DataView(bytes.buffer, bytes.byteOffset, HEADER_LENGTH_BYTES).getUint32(0, true);
  const header = bytes.subarray(HEADER_LENGTH_BYTES, HEADER_LENGTH_BYTES + headerLength);
  const d = new PayloadDeserializer(header, bytes.buffer, bytes.byteOffset + align(HEADER_LENGTH_BYTES + headerLength), copy);
  d.readHeader();
  return d.readValue();
}

/**
 * A hash of a value as this process sees it (its structure and every typed array's bytes), for
 * the divergence check: equal values on two ranks give equal hashes.
 */
export function digestValue(value: unknown): string {
  const enc = encodeValue(value);
  const h = createHash('sha256');
  h.update(enc.json ?? '');
  h.update(enc.meta.join(','));
  if (enc.header) h.update(enc.header);
  for (const v of enc.views) h.update(new Uint8Array(v.buffer, v.byteOffset, v.byteLength));
  return h.digest('hex').slice(0, 16);
}
