/**
 * The rank's message loop. It takes its send/exit functions as parameters so it can be driven
 * in-process by tests; `child-main.ts` wires it to the real IPC channel.
 * @internal
 */
import { RankCollectives } from '../collectives/rank-collectives.js';
import { ProtocolError, SharedMemoryCapacityError } from '../errors.js';
import {
  type CallMessage,
  type ChildMessage,
  type InitMessage,
  PROTOCOL_VERSION,
  expectParentMessage,
} from '../protocol.js';
import { encodeValue } from '../shm/codec.js';
import { type SegmentEnv, SegmentReader, SegmentWriter, fromPayload, toPayload, unlinkSegments } from '../shm/segments.js';
import type { DistributedWorker } from '../worker/distributed-worker.js';
import { serializeError } from '../worker/error-codec.js';

/** How a rank talks to its parent. */
export interface ChildIo {
  send(msg: ChildMessage): void;
  /** Ends the process (in tests: records the code). */
  exit(code: number): void;
}

/** The loop of one rank; feed it every message from the parent with {@link RankLoop.handle}. */
export class RankLoop {
  private worker: DistributedWorker | null = null;
  private comm: RankCollectives | null = null;
  private reader: SegmentReader | null = null;
  private out: SegmentWriter | null = null;
  private init: InitMessage | null = null;

  constructor(private readonly io: ChildIo) {}

  /** Handles one message; resolves when the work it started is done. */
  async handle(raw: unknown): Promise<void> {
    let msg;
    try {
      msg = expectParentMessage(raw);
    } catch (err) {
      this.fatal(err);
      return;
    }
    switch (msg.t) {
      case 'init':
        return this.load(msg);
      case 'call':
        return this.call(msg);
      case 'collGo':
        this.comm?.onGo(msg);
        return;
      case 'exit':
        this.dispose();
        this.io.exit(0);
        return;
    }
  }

  private fatal(err: unknown): void {
    this.io.send({ t: 'fatal', error: serializeError(err) });
    this.dispose();
    this.io.exit(1);
  }

  private async load(msg: InitMessage): Promise<void> {
    if (msg.version !== PROTOCOL_VERSION) {
      this.fatal(new ProtocolError(`Parent speaks protocol ${msg.version}, this rank ${PROTOCOL_VERSION}: the parent and the ranks run different builds of @reactor/distributed. Rebuild it.`));
      return;
    }
    this.init = msg;
    const env: SegmentEnv = { backend: msg.backend, maxShmBytes: msg.maxShmBytes };
    this.reader = new SegmentReader(env);
    try {
      // Load arguments are kept by the worker: copy them out of the input block, which the
      // next call overwrites.
      const args = structuredClone(fromPayload(msg.args, this.reader));
      const mod = (await import(msg.moduleUrl)) as Record<string, unknown>;
      const Cls = mod[msg.exportName] as (new () => DistributedWorker) | undefined;
      if (typeof Cls !== 'function') {
        throw new TypeError(`${msg.moduleUrl} does not export ${msg.exportName} (the compiled module may be stale: rebuild it).`);
      }
      const worker = new Cls();
      worker.rank = msg.rank;
      worker.worldSize = msg.worldSize;
      worker.device = msg.device;
      this.comm = new RankCollectives(msg.rank, msg.worldSize, env, msg.prefix, this.reader, (m) => this.io.send(m));
      worker.comm = this.comm;
      if (msg.rank === 0) {
        const out = new SegmentWriter(env, `${msg.prefix}-r0-out`, "rank 0's results");
        this.out = out;
        // A block that cannot grow enough: resultArray() falls back to a heap array, and the
        // result path then reports the capacity error as undeliverable (the runner stays healthy)
        // instead of a throw in rank 0's generate() alone (a desync).
        worker.resultAllocator = (bytes) => {
          try {
            return out.allocate(bytes);
          } catch (err) {
            if (err instanceof SharedMemoryCapacityError) return null;
            throw err;
          }
        };
      }
      this.worker = worker;
      await worker.load(args);
      this.io.send({ t: 'loaded' });
    } catch (err) {
      this.io.send({ t: 'loadFailed', error: serializeError(err) });
    }
  }

  private async call(msg: CallMessage): Promise<void> {
    const worker = this.worker;
    if (!worker) {
      this.fatal(new ProtocolError(`Rank received call ${msg.id} before it was loaded.`));
      return;
    }
    let result: unknown;
    try {
      if (msg.op === 'generate') {
        this.out?.resetAllocations();
        const input = msg.input ? fromPayload(msg.input, this.reader!) : undefined;
        result = await worker.generate(input);
      } else {
        await worker.reset();
      }
    } catch (err) {
      this.io.send({ t: 'failed', id: msg.id, error: serializeError(err) });
      return;
    }
    if (msg.op !== 'generate' || this.init!.rank !== 0) {
      this.io.send({ t: 'result', id: msg.id, value: null });
      return;
    }
    try {
      this.io.send({ t: 'result', id: msg.id, value: toPayload(encodeValue(result), this.out!) });
    } catch (err) {
      this.io.send({ t: 'failed', id: msg.id, error: serializeError(err), transport: true });
    }
  }

  /** Unlinks this rank's own blocks. */
  dispose(): void {
    this.comm?.dispose();
    this.out?.dispose();
    this.reader?.close();
  }

  /** The parent is gone: nobody will reclaim this runner's blocks, so the rank does. */
  orphaned(): void {
    this.dispose();
    if (this.init) unlinkSegments(this.init.prefix);
  }
}
