/**
 * The bytes of a session snapshot (docs/snapshots.md): one self-checking file, so a snapshot
 * kept in memory, written to disk or sent to another instance reads back only whole.
 *
 * ```
 * offset 0   8 bytes  magic "RXSNAP01"
 * offset 8   u32 LE   header length H
 * offset 12  H bytes  header: UTF-8 JSON { format, app, version, schemaHash, ..., body }
 *            ...      the typed arrays' bytes, each at an 8-byte-aligned offset past the header
 * end - 32   32 bytes SHA-256 of every byte before it
 * ```
 *
 * In `body`, every typed array is replaced by `{ "$snapshotArray": i }`, and the header's
 * `arrays[i]` says its type, offset and length. Plain data is JSON: objects, arrays, strings,
 * finite numbers, booleans, null.
 */
import { createHash } from 'node:crypto';
import { SnapshotError, SnapshotErrorCode } from './snapshot-errors.js';

const MAGIC = Buffer.from('RXSNAP01', 'latin1');
const DIGEST_BYTES = 32;
const ARRAY_KEY = '$snapshotArray';
/** Deepest nesting of a snapshot's plain data (a cycle or a runaway structure stops here). */
const MAX_DEPTH = 64;

type AnyTypedArray =
  | Int8Array
  | Uint8Array
  | Uint8ClampedArray
  | Int16Array
  | Uint16Array
  | Int32Array
  | Uint32Array
  | Float32Array
  | Float64Array
  | BigInt64Array
  | BigUint64Array;

const ARRAY_TYPES = {
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
} as const;
type ArrayTypeName = keyof typeof ARRAY_TYPES;

/** Where one typed array lies in the file. */
interface ArrayEntry {
  type: ArrayTypeName;
  offset: number;
  bytes: number;
}

/** What every snapshot's header carries besides its body. */
export interface SnapshotHeader {
  /** The file format (1). */
  format: number;
  /** The app's name (`@reactorApp({ name })`). */
  app: string;
  /** The app's version (`@reactorApp({ version })`). */
  version: string;
  /** SHA-256 of the app's published schema and its declared snapshot fields: another state shape, another hash. */
  schemaHash: string;
  /** When it was taken (ISO 8601). */
  takenAt: string;
  /** The session step it was taken before. */
  step: number;
}

/** A decoded snapshot: its header and its body (typed arrays are copies the caller owns). */
export interface DecodedSnapshot {
  header: SnapshotHeader;
  body: unknown;
}

const align8 = (n: number): number => (n + 7) & ~7;

/**
 * Encodes a header and a body of typed arrays and plain data into one checked file.
 * @throws SnapshotError `snapshot_value` for a value that is not plain data (a function, a Map,
 *   a class instance, NaN), naming its path; `snapshot_too_big` past `maxBytes`
 */
export function encodeSnapshot(header: SnapshotHeader, body: unknown, maxBytes: number): Uint8Array {
  const arrays: AnyTypedArray[] = [];
  const entries: ArrayEntry[] = [];
  let dataBytes = 0;
  const walk = (v: unknown, path: string, depth: number): unknown => {
    if (depth > MAX_DEPTH) throw new SnapshotError(SnapshotErrorCode.Value, `${path} is nested deeper than ${MAX_DEPTH} levels (a cycle?)`);
    if (v === null || typeof v === 'string' || typeof v === 'boolean') return v;
    if (typeof v === 'number') {
      if (!Number.isFinite(v)) throw new SnapshotError(SnapshotErrorCode.Value, `${path} is ${String(v)}: a snapshot holds finite numbers only`);
      return v;
    }
    if (ArrayBuffer.isView(v) && !(v instanceof DataView)) {
      const type = v.constructor.name as ArrayTypeName;
      if (!(type in ARRAY_TYPES)) throw new SnapshotError(SnapshotErrorCode.Value, `${path} is a ${type}, which a snapshot cannot hold`);
      arrays.push(v as AnyTypedArray);
      entries.push({ type, offset: 0, bytes: v.byteLength });
      dataBytes = align8(dataBytes) + v.byteLength;
      if (dataBytes > maxBytes) throw tooBig(dataBytes, maxBytes);
      return { [ARRAY_KEY]: arrays.length - 1 };
    }
    if (Array.isArray(v)) return v.map((x, i) => walk(x, `${path}[${i}]`, depth + 1));
    if (typeof v === 'object' && v !== undefined) {
      const proto = Object.getPrototypeOf(v) as unknown;
      if (proto !== Object.prototype && proto !== null) {
        const name = (v as object).constructor?.name ?? 'object';
        throw new SnapshotError(
          SnapshotErrorCode.Value,
          `${path} is a ${name}: a snapshot holds typed arrays and plain data (objects, arrays, strings, numbers, booleans, null)`,
        );
      }
      const out: Record<string, unknown> = {};
      for (const [k, x] of Object.entries(v)) if (x !== undefined) out[k] = walk(x, `${path}.${k}`, depth + 1);
      return out;
    }
    throw new SnapshotError(SnapshotErrorCode.Value, `${path} is a ${typeof v}: a snapshot holds typed arrays and plain data`);
  };
  const plain = walk(body, 'snapshot', 0);
  // Offsets are relative to the end of the header, so they do not depend on the header's own length.
  let at = 0;
  for (const e of entries) {
    at = align8(at);
    e.offset = at;
    at += e.bytes;
  }
  const headerBytes = Buffer.from(JSON.stringify({ ...header, arrays: entries, body: plain }), 'utf8');
  const dataStart = align8(12 + headerBytes.length);
  const total = dataStart + at + DIGEST_BYTES;
  if (total > maxBytes) throw tooBig(total, maxBytes);
  const out = Buffer.alloc(total);
  MAGIC.copy(out, 0);
  out.writeUInt32LE(headerBytes.length, 8);
  headerBytes.copy(out, 12);
  for (const [i, a] of arrays.entries()) out.set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength), dataStart + entries[i]!.offset);
  createHash('sha256')
    .update(out.subarray(0, total - DIGEST_BYTES))
    .digest()
    .copy(out, total - DIGEST_BYTES);
  // A plain Uint8Array (Buffer.alloc's memory is its own, not the pool's): slice() copies, as users expect.
  return new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
}

/**
 * Reads a snapshot file back, whole or not at all.
 * @throws SnapshotError `snapshot_too_big` past `maxBytes`; `snapshot_truncated` when it is shorter
 *   than its header says; `snapshot_corrupt` for a wrong magic, a checksum that does not match,
 *   or a header that does not parse
 */
export function decodeSnapshot(bytes: Uint8Array, maxBytes: number): DecodedSnapshot {
  if (bytes.byteLength > maxBytes) throw tooBig(bytes.byteLength, maxBytes);
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (buf.length < 12 || !buf.subarray(0, 8).equals(MAGIC)) {
    if (buf.length < 12 && MAGIC.subarray(0, buf.length).equals(buf.subarray(0, 8))) {
      throw new SnapshotError(SnapshotErrorCode.Truncated, `the snapshot is truncated: ${buf.length} bytes, not even its header`);
    }
    throw new SnapshotError(SnapshotErrorCode.Corrupt, 'this is not a session snapshot (its first bytes are not RXSNAP01)');
  }
  const headerLength = buf.readUInt32LE(8);
  const dataStart = align8(12 + headerLength);
  if (buf.length < dataStart + DIGEST_BYTES) {
    throw new SnapshotError(SnapshotErrorCode.Truncated, `the snapshot is truncated: ${buf.length} bytes, its header alone needs ${dataStart + DIGEST_BYTES}`);
  }
  let parsed: SnapshotHeader & { arrays: ArrayEntry[]; body: unknown };
  try {
    parsed = JSON.parse(buf.subarray(12, 12 + headerLength).toString('utf8')) as typeof parsed;
  } catch {
    throw new SnapshotError(SnapshotErrorCode.Corrupt, 'the snapshot is corrupt: its header is not JSON');
  }
  const arrays = Array.isArray(parsed?.arrays) ? parsed.arrays : [];
  const last = arrays.reduce((end, e) => Math.max(end, (Number(e?.offset) || 0) + (Number(e?.bytes) || 0)), 0);
  const expected = dataStart + last + DIGEST_BYTES;
  if (buf.length < expected) throw new SnapshotError(SnapshotErrorCode.Truncated, `the snapshot is truncated: ${buf.length} of its ${expected} bytes`);
  const digest = createHash('sha256')
    .update(buf.subarray(0, buf.length - DIGEST_BYTES))
    .digest();
  if (buf.length !== expected || !digest.equals(buf.subarray(buf.length - DIGEST_BYTES))) {
    throw new SnapshotError(SnapshotErrorCode.Corrupt, 'the snapshot is corrupt: its SHA-256 does not match its bytes');
  }
  const revive = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(revive);
    if (v !== null && typeof v === 'object') {
      const o = v as Record<string, unknown>;
      const keys = Object.keys(o);
      if (keys.length === 1 && typeof o[ARRAY_KEY] === 'number') {
        const e = arrays[o[ARRAY_KEY]];
        const Ctor = e ? ARRAY_TYPES[e.type] : undefined;
        if (!e || !Ctor) throw new SnapshotError(SnapshotErrorCode.Corrupt, 'the snapshot is corrupt: an array entry is missing');
        const copy = new Uint8Array(buf.subarray(dataStart + e.offset, dataStart + e.offset + e.bytes));
        return new Ctor(copy.buffer, 0, e.bytes / Ctor.BYTES_PER_ELEMENT);
      }
      const out: Record<string, unknown> = {};
      for (const k of keys) out[k] = revive(o[k]);
      return out;
    }
    return v;
  };
  const { arrays: _arrays, body, ...header } = parsed;
  return { header: header as SnapshotHeader, body: revive(body) };
}

function tooBig(bytes: number, maxBytes: number): SnapshotError {
  return new SnapshotError(
    SnapshotErrorCode.TooBig,
    `the snapshot takes ${bytes} bytes, over its limit of ${maxBytes} (@reactorApp({ snapshot: { maxBytes } }) raises it)`,
  );
}
