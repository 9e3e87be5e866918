/**
 * Shared-memory segments: one writer owns a growing block per role, readers map (or read) it.
 *
 * Two backends with one contract:
 * - `native`: POSIX shared memory mapped in every process (`shm-typed-array`); a reader's view is
 *   the writer's memory, so a message is copied once (by the writer) and read in place.
 * - `file`: pure Node. The writer `pwrite`s the message into a file in `/dev/shm`; a reader
 *   `pread`s it into a buffer it reuses. Two copies, no native code; used when the binding
 *   cannot load.
 *
 * Segment names are `<prefix>-<role>-g<generation>` (the prefix is
 * `reactor-<parent pid>.<pid namespace>-<runner#>-<random>`); the prefix is per runner and known to the
 * parent, which unlinks everything under it after any failure. A writer grows by creating the
 * next generation (at least double) and unlinking the old one; mappings of an old generation are
 * unmapped only once nothing in this process references them (the binding unmaps a mapping when
 * its Buffer is garbage), so a view handed out earlier never points at unmapped memory.
 * @internal
 */
import { closeSync, ftruncateSync, openSync, readdirSync, readlinkSync, readSync, statfsSync, unlinkSync, writeSync } from 'node:fs';
import { createRequire } from 'node:module';
import { SharedMemoryCapacityError } from '../errors.js';
import type { Payload, ShmBackendKind, SlotRef } from '../protocol.js';
import { type EncodedValue, align, decodeValue, messagePieces, setMetaOffset, writeMessage } from './codec.js';

/** Where POSIX shared memory lives on Linux. */
export const SHM_DIR = '/dev/shm';
/** First capacity of every block (grown by at least doubling, as the original). */
export const INITIAL_SEGMENT_BYTES = 1 << 20;
/** Rounding of block sizes. */
const PAGE = 4096;

interface NativeShm {
  create(count: number, typeKey: 'Buffer', key: string): Buffer | null;
  get(key: string, typeKey: 'Buffer'): Buffer | null;
  detach(key: string, forceDestroy?: boolean): number;
}

let nativeModule: NativeShm | null | undefined;
let nativeLoadError: string | undefined;

/** Loads the native binding once; null (with {@link nativeShmLoadError}) when it cannot load or `REACTOR_SHM_NATIVE=0`. */
export function loadNativeShm(): NativeShm | null {
  if (nativeModule !== undefined) return nativeModule;
  if (process.env.REACTOR_SHM_NATIVE === '0') {
    nativeLoadError = 'disabled by REACTOR_SHM_NATIVE=0';
    nativeModule = null;
    return null;
  }
  try {
    const require = createRequire(import.meta.url);
    nativeModule = require('shm-typed-array') as NativeShm;
  } catch (err) {
    nativeLoadError = err instanceof Error ? err.message.split('\n')[0] : String(err);
    nativeModule = null;
  }
  return nativeModule;
}

export function nativeShmLoadError(): string | undefined {
  return nativeLoadError;
}

/** Why a block cannot be created, or null when it fits. Pure; exported for tests. */
export function checkFits(what: string, neededBytes: number, freeBytes: number, maxShmBytes: number | null): SharedMemoryCapacityError | null {
  if (maxShmBytes !== null && neededBytes > maxShmBytes) {
    return new SharedMemoryCapacityError(what, neededBytes, maxShmBytes, 'are allowed by options.maxShmBytes');
  }
  if (neededBytes > freeBytes) {
    return new SharedMemoryCapacityError(what, neededBytes, freeBytes, `are free in ${SHM_DIR}`);
  }
  return null;
}

/** Free bytes in `/dev/shm`. */
export function shmFreeBytes(): number {
  const s = statfsSync(SHM_DIR);
  return s.bavail * s.bsize;
}

/** Names (without the leading `/`) of every segment under `prefix` that exists now. */
export function listSegments(prefix: string): string[] {
  try {
    return readdirSync(SHM_DIR).filter((f) => f.startsWith(prefix));
  } catch {
    return [];
  }
}

/** Unlinks every segment under `prefix` (best effort, synchronous: also used from exit hooks). */
export function unlinkSegments(prefix: string): number {
  let n = 0;
  for (const f of listSegments(prefix)) {
    try {
      unlinkSync(`${SHM_DIR}/${f}`);
      n++;
    } catch {
      // already gone
    }
  }
  return n;
}

/** Prefix shared by every runner of every process: `reactor-<pid>.<pid namespace>-`. */
export const SEGMENT_NAMESPACE = 'reactor-';

let ownPidNamespace: string | undefined;
/**
 * This process's pid namespace (the inode of `/proc/self/ns/pid`), or `0` where that cannot be
 * read. Containers sharing `/dev/shm` (`--ipc=host`) have separate pid namespaces: a pid is
 * only meaningful inside its own, so names carry it.
 */
export function pidNamespace(): string {
  if (ownPidNamespace === undefined) {
    try {
      ownPidNamespace = /\[(\d+)\]/.exec(readlinkSync('/proc/self/ns/pid'))?.[1] ?? '0';
    } catch {
      ownPidNamespace = '0';
    }
  }
  return ownPidNamespace;
}

/** The name prefix of this process's segments: `reactor-<pid>.<pid namespace>`. */
export function processSegmentPrefix(): string {
  return `${SEGMENT_NAMESPACE}${process.pid}.${pidNamespace()}`;
}

/**
 * Unlinks segments left by runner processes that died without cleaning up (both the parent and
 * its ranks killed with SIGKILL). Names carry the parent's pid and pid namespace; only names of
 * this pid namespace whose pid no longer exists are removed (another container's segments,
 * whose pids mean nothing here, are left alone).
 */
export function sweepStaleSegments(): number {
  let n = 0;
  const ns = pidNamespace();
  for (const f of listSegments(SEGMENT_NAMESPACE)) {
    const owner = f.slice(SEGMENT_NAMESPACE.length).split('-')[0] ?? '';
    const [pidText, ownerNs] = owner.split('.');
    const pid = Number(pidText);
    if (ownerNs !== ns || !Number.isInteger(pid) || pid <= 0 || pid === process.pid) continue;
    try {
      process.kill(pid, 0);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ESRCH') {
        try {
          unlinkSync(`${SHM_DIR}/${f}`);
          n++;
        } catch {
          // raced with another sweeper
        }
      }
    }
  }
  return n;
}

/**
 * Forget a native mapping: it is unmapped once the last view of it is garbage. The binding does
 * that itself (the free callback of the Buffer it returned munmaps it). It must not be detached
 * by name as well: the binding's bookkeeping keeps the old address after its free callback ran,
 * so a second detach would munmap that address again, under whatever was mapped there since (a
 * rank then dies of SIGSEGV).
 */
export function retireNative(_name: string, _mapping: Buffer): void {
  // Nothing to do: dropping the last reference is the release.
}

function nextCapacity(current: number, needed: number): number {
  return Math.ceil(Math.max(needed, current * 2, INITIAL_SEGMENT_BYTES) / PAGE) * PAGE;
}

/** Options shared by writers and readers of one process. */
export interface SegmentEnv {
  backend: ShmBackendKind;
  maxShmBytes: number | null;
  /** Fault injection (`shm_full`): while set, every write fails as if /dev/shm were full. */
  injectedFull?: boolean;
}

/**
 * The writing side of one role (the runner's input, rank 0's results, a rank's collective slot).
 * Not thread-safe; one writer per role.
 */
export class SegmentWriter {
  private generation = 0;
  private name: string | null = null;
  private capacity = 0;
  private mapping: Buffer | null = null;
  private fd: number | null = null;
  private bump = 0;

  constructor(
    private readonly env: SegmentEnv,
    /** `<prefix>-<role>` */
    readonly baseName: string,
    private readonly what: string,
  ) {}

  /**
   * Writes `msg` into the block, growing it first if needed.
   * @throws {@link SharedMemoryCapacityError} when a bigger block does not fit
   */
  write(msg: EncodedValue): SlotRef {
    if (this.env.injectedFull) throw new SharedMemoryCapacityError(this.what, msg.totalBytes, 0, `are free in ${SHM_DIR} (injected shm_full fault)`);
    if (this.mapping && msg.json !== null) this.placeInPlace(msg);
    if (msg.totalBytes > this.capacity) {
      this.grow(msg.totalBytes);
      // Arrays allocated in the old block are foreign now: they get copied.
      if (this.mapping && msg.json !== null) this.placeInPlace(msg);
    }
    if (this.env.backend === 'native') {
      writeMessage(this.mapping!.subarray(0, msg.totalBytes), msg);
    } else {
      for (const p of messagePieces(msg)) writeSync(this.fd!, p.bytes, 0, p.bytes.byteLength, p.at);
    }
    return { seg: this.name!, len: msg.totalBytes };
  }

  /**
   * Native backend: `bytes` of this block for the writer to fill in place (a bump allocation
   * after the previous ones; see {@link SegmentWriter.resetAllocations}). A message whose arrays
   * already lie in the block is written without copying them. Null with the file backend.
   */
  allocate(bytes: number): Uint8Array | null {
    if (this.env.backend !== 'native') return null;
    if (this.env.injectedFull) throw new SharedMemoryCapacityError(this.what, bytes, 0, `are free in ${SHM_DIR} (injected shm_full fault)`);
    const at = this.bump;
    const end = at + bytes;
    // Headroom, so the small arrays that usually follow a big one fit in the same block.
    if (end > this.capacity || !this.mapping) this.grow(end + INITIAL_SEGMENT_BYTES);
    this.bump = align(end);
    return this.mapping!.subarray(at, end);
  }

  /** Starts allocating from the block's beginning again (the previous message is superseded). */
  resetAllocations(): void {
    this.bump = 0;
  }

  /**
   * json-format messages: arrays that already lie in this block keep their offsets (and are not
   * copied); the others are placed after them.
   */
  private placeInPlace(msg: EncodedValue): void {
    const mapping = this.mapping!;
    let fixedEnd = 0;
    const fixed: (number | null)[] = msg.views.map((v) => {
      if (v.buffer !== mapping.buffer) return null;
      const off = v.byteOffset - mapping.byteOffset;
      fixedEnd = Math.max(fixedEnd, off + v.byteLength);
      return off;
    });
    let cursor = align(fixedEnd);
    for (let i = 0; i < msg.views.length; i++) {
      let off = fixed[i];
      if (off === null || off === undefined) {
        off = cursor;
        cursor = align(cursor + msg.views[i]!.byteLength);
      }
      setMetaOffset(msg, i, off);
    }
    msg.totalBytes = Math.max(cursor, fixedEnd);
  }

  private grow(needed: number): void {
    const capacity = nextCapacity(this.capacity, needed);
    if (checkFits(this.what, capacity, shmFreeBytes(), this.env.maxShmBytes)) {
      // The doubled size does not fit but the exact one might.
      const exact = Math.ceil(needed / PAGE) * PAGE;
      const err = checkFits(this.what, exact, shmFreeBytes(), this.env.maxShmBytes);
      if (err) throw err;
      this.replace(exact);
      return;
    }
    this.replace(capacity);
  }

  private replace(capacity: number): void {
    this.release();
    this.generation++;
    const name = `${this.baseName}-g${this.generation}`;
    if (this.env.backend === 'native') {
      const shm = loadNativeShm();
      if (!shm) throw new Error(`The native shared-memory binding is not loaded (${nativeLoadError ?? 'unknown reason'}).`);
      const mapping = shm.create(capacity, 'Buffer', `/${name}`);
      if (!mapping) throw new Error(`Shared-memory segment ${name} already exists.`);
      this.mapping = mapping;
    } else {
      this.fd = openSync(`${SHM_DIR}/${name}`, 'wx+', 0o600);
      // Sparse until written; a reader may read a message's alignment padding past the last write.
      ftruncateSync(this.fd, capacity);
    }
    this.name = name;
    this.capacity = capacity;
  }

  private release(): void {
    if (this.name === null) return;
    try {
      unlinkSync(`${SHM_DIR}/${this.name}`);
    } catch {
      // the parent may have reclaimed it already
    }
    if (this.mapping) retireNative(this.name, this.mapping);
    if (this.fd !== null) closeSync(this.fd);
    this.mapping = null;
    this.fd = null;
    this.name = null;
    this.capacity = 0;
  }

  /** Unlinks the block; later writes create a new one. */
  dispose(): void {
    this.release();
  }
}

interface Mapped {
  name: string;
  mapping: Buffer | null;
  fd: number | null;
  /** file backend: the reused destination of reads */
  buffer: Uint8Array | null;
}

/**
 * The reading side: returns a message's bytes for a {@link SlotRef}. With the native backend the
 * bytes are the writer's memory (no copy); with the file backend they are read into a buffer
 * reused per role. Either way they stay valid until the writer writes that role again.
 */
export class SegmentReader {
  private readonly byRole = new Map<string, Mapped>();

  constructor(private readonly env: SegmentEnv) {}

  read(ref: SlotRef): Uint8Array {
    const role = ref.seg.slice(0, ref.seg.lastIndexOf('-g'));
    let m = this.byRole.get(role);
    if (!m || m.name !== ref.seg) {
      if (m) this.retire(m);
      m = this.open(ref.seg);
      this.byRole.set(role, m);
    }
    if (m.mapping) {
      if (ref.len > m.mapping.byteLength) throw new RangeError(`Message of ${ref.len} bytes overruns segment ${ref.seg}.`);
      return m.mapping.subarray(0, ref.len);
    }
    if (!m.buffer || m.buffer.byteLength < ref.len) m.buffer = new Uint8Array(Math.max(ref.len, (m.buffer?.byteLength ?? 0) * 2));
    let done = 0;
    while (done < ref.len) {
      const n = readSync(m.fd!, m.buffer, done, ref.len - done, done);
      if (n === 0) throw new RangeError(`Shared-memory file ${ref.seg} ended after ${done} of ${ref.len} bytes.`);
      done += n;
    }
    return m.buffer.subarray(0, ref.len);
  }

  private open(name: string): Mapped {
    if (this.env.backend === 'native') {
      const mapping = loadNativeShm()?.get(`/${name}`, 'Buffer') ?? null;
      if (!mapping) throw new Error(`Shared-memory segment ${name} does not exist (was it reclaimed after a failure?).`);
      return { name, mapping, fd: null, buffer: null };
    }
    return { name, mapping: null, fd: openSync(`${SHM_DIR}/${name}`, 'r'), buffer: null };
  }

  private retire(m: Mapped): void {
    if (m.mapping) retireNative(m.name, m.mapping);
    if (m.fd !== null) closeSync(m.fd);
  }

  /** Forgets every mapping (native mappings are unmapped once their views are garbage). */
  close(): void {
    for (const m of this.byRole.values()) this.retire(m);
    this.byRole.clear();
  }
}

/** Puts an encoded value on its way: JSON inline, bytes (if any) through `writer`'s block. */
export function toPayload(enc: EncodedValue, writer: SegmentWriter): Payload {
  const p: Payload = {};
  if (enc.json !== null) {
    p.j = enc.json;
    if (enc.meta.length) p.m = enc.meta;
  }
  if (enc.totalBytes > 0) p.s = writer.write(enc);
  return p;
}

/**
 * Decodes a payload; typed arrays are views into `reader`'s bytes for that block (see
 * {@link SegmentReader}), or with `copy` arrays the caller owns.
 */
export function fromPayload(p: Payload, reader: SegmentReader, copy = false): unknown {
  return decodeValue(p.j ?? null, p.m ?? [], p.s ? reader.read(p.s) : null, copy);
}
