/**
 * The collective blocks: where a rank writes the parts it contributes to collectives, and where
 * its peers read them in place. This module is the only one that does offset arithmetic on them.
 *
 * Each rank owns one block, `<prefix>-r<N>-coll-g<generation>` (it creates, grows and unlinks
 * it; the parent unlinks everything under the prefix after any failure). A rank copies its part
 * into its block before it arrives at the collective (the one copy a part costs) and tells the
 * parent where it lies; once every rank has arrived the parent passes those places to the ranks
 * that read them, which map the block and return views of it: no relay of bytes through the
 * parent, no copy on the reading side. The writer owns the block because it is the one that
 * knows its part's size: it can place or grow without asking anyone (no extra round trip).
 *
 * Within one call (`load()`, a `generate()`, a `reset()`) every part a rank writes gets a region
 * of its own, after the previous one (a bump allocation); the next call starts again at offset 0.
 * So what a collective returns stays valid until the next call begins, like the call's input
 * views and `resultArray()`. A call begins only once every rank has answered the previous one:
 * every read of the previous call is done.
 *
 * Layout of a block (the header is what `shm-typed-array` reads when it maps an existing object):
 * ```
 * file offset 0                    u64 LE  capacity of the data area
 * file offset 8 = data offset 0            the call's first part (byteLength bytes)
 * data offset align64(previous end)        the call's next part ...
 * ```
 * A block too small for the next part is replaced by a bigger one (a new generation, sized for
 * everything the call has written so far plus the new part, at least double). The old generation
 * is unlinked only when the next call begins: a peer may still have to map it to read a part of
 * this call. Readers keep a mapping until its last view is garbage, so no view ever points at
 * unmapped memory.
 * @internal
 */
import { closeSync, ftruncateSync, openSync, readSync, unlinkSync, writeSync } from 'node:fs';
import { SharedMemoryCapacityError } from '../errors.js';
import type { ShmBackendKind } from '../protocol.js';
import { align } from './codec.js';
import { INITIAL_SEGMENT_BYTES, SHM_DIR, type SegmentEnv, checkFits, loadNativeShm, retireNative, shmFreeBytes } from './segments.js';

/** Rounding of block sizes. */
const PAGE = 4096;
/** The u64 LE capacity before the data area (the native mapping starts after it; the file backend adds it). */
const BLOCK_HEADER_BYTES = 8;

/**
 * A rank's own collective block: places each part it writes during a call after the previous
 * one, growing (a new generation) when a part does not fit.
 */
export class CollectiveArena {
  private name: string | null = null;
  private generation = 0;
  private capacity = 0;
  private used = 0;
  /** Bytes placed in this call, over every generation: the size the next generation is given. */
  private callBytes = 0;
  /** Generations replaced during this call: unlinked when the next call begins. */
  private readonly retired: string[] = [];

  constructor(
    private readonly env: SegmentEnv,
    /** `<prefix>-r<N>-coll` */
    private readonly stem: string,
    private readonly what: string,
  ) {}

  /**
   * Room for a part of `bytes` bytes: the block's segment name and the part's data offset
   * (64-byte aligned). `bytes` must be > 0.
   * @throws {@link SharedMemoryCapacityError} when a bigger block does not fit in /dev/shm or `maxShmBytes` (or with the `shm_full` fault)
   */
  place(bytes: number): { seg: string; at: number } {
    if (this.env.injectedFull) throw new SharedMemoryCapacityError(this.what, bytes, 0, `are free in ${SHM_DIR} (injected shm_full fault)`);
    if (this.name === null || this.used + bytes > this.capacity) this.grow(bytes);
    const at = this.used;
    this.used = align(at + bytes);
    this.callBytes += this.used - at;
    return { seg: this.name!, at };
  }

  private grow(bytes: number): void {
    const wanted = pageRound(Math.max(this.callBytes + align(bytes), this.capacity * 2, INITIAL_SEGMENT_BYTES));
    let capacity = wanted;
    if (checkFits(this.what, wanted, shmFreeBytes(), this.env.maxShmBytes)) {
      // The generous size does not fit but this part alone might.
      const err = checkFits(this.what, pageRound(bytes), shmFreeBytes(), this.env.maxShmBytes);
      if (err) throw err;
      capacity = pageRound(bytes);
    }
    const name = `${this.stem}-g${this.generation + 1}`;
    const fd = openSync(`${SHM_DIR}/${name}`, 'wx', 0o600);
    try {
      // Sparse: pages are allocated when first written, then reused call after call.
      ftruncateSync(fd, BLOCK_HEADER_BYTES + capacity);
      const header = Buffer.alloc(BLOCK_HEADER_BYTES);
      header.writeBigUInt64LE(BigInt(capacity), 0);
      writeSync(fd, header, 0, BLOCK_HEADER_BYTES, 0);
    } finally {
      closeSync(fd);
    }
    if (this.name !== null) this.retired.push(this.name);
    this.generation++;
    this.name = name;
    this.capacity = capacity;
    this.used = 0;
  }

  /** A new call begins: what the previous call's collectives returned has expired. */
  reset(): void {
    for (const name of this.retired.splice(0)) unlinkQuietly(name);
    this.used = 0;
    this.callBytes = 0;
  }

  /** Unlinks every generation. */
  dispose(): void {
    this.reset();
    if (this.name !== null) unlinkQuietly(this.name);
    this.name = null;
    this.capacity = 0;
  }
}

function pageRound(n: number): number {
  return Math.ceil(n / PAGE) * PAGE;
}

function unlinkQuietly(name: string): void {
  try {
    unlinkSync(`${SHM_DIR}/${name}`);
  } catch {
    // already reclaimed
  }
}

interface Opened {
  name: string;
  /** native: the mapping */
  mapping: Buffer | null;
  /** file: the open file and the reused destination of reads */
  fd: number | null;
  buffer: Uint8Array | null;
}

/**
 * Opens blocks by name, the rank's own (to write its parts) and its peers' (to read theirs). Keeps
 * one mapping (or file) per block stem, so steady-state collectives touch only pages that are
 * already mapped: no page faults and, on the native backend, no system calls.
 */
export class CollectiveMemory {
  private readonly byStem = new Map<string, Opened>();

  constructor(private readonly backend: ShmBackendKind) {}

  /** Copies `bytes` to data offset `at` of block `seg`: the one copy a part costs. */
  write(seg: string, at: number, bytes: Uint8Array): void {
    if (bytes.byteLength === 0) return;
    const o = this.open(seg);
    if (o.mapping) {
      if (at + bytes.byteLength > o.mapping.byteLength) throw new RangeError(`A part of ${bytes.byteLength} bytes at ${at} overruns block ${seg}.`);
      o.mapping.set(bytes, at);
      return;
    }
    let done = 0;
    while (done < bytes.byteLength) done += writeSync(o.fd!, bytes, done, bytes.byteLength - done, BLOCK_HEADER_BYTES + at + done);
  }

  /**
   * The `length` bytes at data offset `at` of block `seg`: the block's own memory (native), or a
   * mirror of the block, reused call after call, that they were read into (file). Regions of one
   * call do not overlap, so earlier views of the mirror stay intact until the next call.
   */
  read(seg: string, at: number, length: number): Uint8Array {
    const o = this.open(seg);
    if (o.mapping) {
      if (at + length > o.mapping.byteLength) throw new RangeError(`Reading ${length} bytes at ${at} overruns block ${seg}.`);
      return o.mapping.subarray(at, at + length);
    }
    // A bigger mirror when needed; views of the old one keep it alive and unchanged.
    if (!o.buffer || o.buffer.byteLength < at + length) o.buffer = new Uint8Array(Math.max(at + length, (o.buffer?.byteLength ?? 0) * 2));
    let done = 0;
    while (done < length) {
      const n = readSync(o.fd!, o.buffer, at + done, length - done, BLOCK_HEADER_BYTES + at + done);
      if (n === 0) throw new RangeError(`Block ${seg} ended after ${at + done} of ${at + length} bytes.`);
      done += n;
    }
    return o.buffer.subarray(at, at + length);
  }

  private open(seg: string): Opened {
    const stem = seg.slice(0, seg.lastIndexOf('-g'));
    const known = this.byStem.get(stem);
    if (known && known.name === seg) return known;
    if (known) this.retire(known);
    let opened: Opened;
    if (this.backend === 'native') {
      const mapping = loadNativeShm()?.get(`/${seg}`, 'Buffer') ?? null;
      if (!mapping) throw new Error(`Collective block ${seg} does not exist (was it reclaimed after a failure?).`);
      opened = { name: seg, mapping, fd: null, buffer: null };
    } else {
      opened = { name: seg, mapping: null, fd: openSync(`${SHM_DIR}/${seg}`, 'r+'), buffer: null };
    }
    this.byStem.set(stem, opened);
    return opened;
  }

  private retire(o: Opened): void {
    // A view handed out earlier may still point into the mapping: it is unmapped (by the binding)
    // only once it is garbage; see retireNative().
    if (o.mapping) retireNative(o.name, o.mapping);
    if (o.fd !== null) closeSync(o.fd);
  }

  /** Forgets every block (mappings are unmapped once their views are garbage). */
  close(): void {
    for (const o of this.byStem.values()) this.retire(o);
    this.byStem.clear();
  }
}
