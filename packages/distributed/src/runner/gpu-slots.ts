/**
 * Session slots of one GPU, shared by the instances on a host (issue 42, `gpu.sessions_per_gpu`).
 *
 * Slot `k` of GPU `g` is the file `<dir>/gpu-<g>.slot-<k>.lock`, held with an exclusive `flock`
 * by one small `flock … cat` child per slot. The lock is the kernel's: it is released when the
 * holder dies however it dies (the child's stdin is a pipe from this process; a SIGKILL of this
 * process closes it, `cat` reads EOF and exits, the lock goes with it), and it works across
 * containers that mount the same folder (PID namespaces do not matter to `flock`). An instance
 * without a slot waits for one in the kernel (a blocking `flock` on every slot), so a slot that
 * frees is taken at once, with no polling.
 *
 * An instance takes a slot as soon as it can and keeps it (idle or in a session) until it exits
 * or {@link GpuSlotLease.close}: "ready" then means "has a slot", exactly, so the router and
 * Agones never hand out an instance that would be refused (docs/decisions.md, issue 42).
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { accessSync, constants, mkdirSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Logger, silentLogger } from '@reactor/log';
import { ReadinessCode } from '@reactor/protocol';
import { DistributedError, DistributedErrorCode } from '../errors.js';

/** Where the slot files live unless `gpu.slot_dir` / `REACTOR_GPU_SLOT_DIR` says otherwise. */
export const DEFAULT_GPU_SLOT_DIR = join(tmpdir(), 'reactor-gpu-slots');
/** The most sessions one GPU may be given. */
export const MAX_SESSIONS_PER_GPU = 64;
/** How long a slot waiter that failed (not a conflict: an error) waits before it tries again, ms. */
const WAITER_RETRY_MS = 1_000;

/** Options of {@link GpuSlotLease.open}. */
export interface GpuSlotOptions {
  /** At most this many sessions run on the GPU at once, across the instances that share it (1..64). */
  sessionsPerGpu: number;
  /** The folder every instance on the host shares (a hostPath on Kubernetes). */
  dir: string;
  /** The GPU's identity: its index or UUID, the same string in every instance that shares it. */
  gpu: string;
  logger?: Logger;
  /** The `flock` executable (util-linux), default `flock` on `PATH`. */
  flock?: string;
}

/** `gpu_slot_dir` or `gpu_slot_unavailable`: the lease cannot work on this machine. */
export class GpuSlotError extends DistributedError {}

/** The refusal a host reads while this instance holds no slot. */
export interface GpuSlotRefusal {
  code: typeof ReadinessCode.GpuFull;
  message: string;
}

/**
 * This instance's claim on one session slot of its GPU (a `SessionAdmission` of
 * `@reactor/runtime`: its {@link GpuSlotLease.refusal} says `gpu_full` while it holds none).
 * @example
 * const lease = GpuSlotLease.open({ sessionsPerGpu: 2, dir: '/var/run/reactor/gpu-slots', gpu: '0' });
 * new AppHost(App, { admission: lease });
 */
export class GpuSlotLease {
  readonly sessionsPerGpu: number;
  readonly gpu: string;
  readonly dir: string;
  readonly #flock: string;
  readonly #log: Logger;
  #held: { slot: number; child: ChildProcess } | undefined;
  readonly #waiters = new Map<number, ChildProcess>();
  readonly #listeners = new Set<(slot: number | undefined) => void>();
  #retry: NodeJS.Timeout | undefined;
  #closed = false;

  private constructor(o: Required<Omit<GpuSlotOptions, 'logger'>> & { logger: Logger }) {
    this.sessionsPerGpu = o.sessionsPerGpu;
    this.gpu = o.gpu;
    this.dir = o.dir;
    this.#flock = o.flock;
    this.#log = o.logger;
  }

  /**
   * Checks the options and the machine (the folder is created and written, `flock` runs), then
   * starts waiting for a slot in the background. Nothing is left behind when it throws.
   * @throws RangeError / TypeError for a bad option (naming it)
   * @throws GpuSlotError `gpu_slot_dir` (the folder cannot be made or written), `gpu_slot_unavailable` (no `flock`)
   */
  static open(options: GpuSlotOptions): GpuSlotLease {
    const { sessionsPerGpu, dir, gpu } = options;
    if (!Number.isInteger(sessionsPerGpu) || sessionsPerGpu < 1 || sessionsPerGpu > MAX_SESSIONS_PER_GPU) {
      throw new RangeError(`gpu.sessions_per_gpu must be a whole number from 1 to ${MAX_SESSIONS_PER_GPU}, got ${JSON.stringify(sessionsPerGpu)}`);
    }
    if (typeof gpu !== 'string' || gpu.trim() === '') throw new TypeError(`gpu.device must name the GPU (its index or UUID), got ${JSON.stringify(gpu)}`);
    if (typeof dir !== 'string' || dir === '') throw new TypeError(`gpu.slot_dir must be a folder path, got ${JSON.stringify(dir)}`);
    try {
      mkdirSync(dir, { recursive: true, mode: 0o1777 });
      if (!statSync(dir).isDirectory()) throw new Error('not a folder');
      accessSync(dir, constants.W_OK | constants.X_OK);
    } catch (cause) {
      throw new GpuSlotError(
        DistributedErrorCode.GpuSlotDir,
        `gpu.slot_dir ${dir} cannot hold the GPU's session slots (${(cause as Error).message}): name a folder this user can create and write, ` +
          'the same one for every instance that shares the GPU (REACTOR_GPU_SLOT_DIR overrides it)',
        { cause },
      );
    }
    const flock = options.flock ?? 'flock';
    const probe = spawnSync(flock, ['--version'], { encoding: 'utf8', timeout: 10_000 });
    if (probe.error !== undefined || probe.status !== 0) {
      throw new GpuSlotError(
        DistributedErrorCode.GpuSlotUnavailable,
        `gpu.sessions_per_gpu needs util-linux's flock to hold a GPU session slot, and \`${flock} --version\` failed ` +
          `(${probe.error?.message ?? `exit ${probe.status}: ${probe.stderr.trim()}`}): install util-linux, or remove gpu.sessions_per_gpu`,
      );
    }
    const lease = new GpuSlotLease({ sessionsPerGpu, dir, gpu: gpu.trim(), flock, logger: options.logger ?? silentLogger });
    lease.#compete();
    return lease;
  }

  /** The slot this instance holds (0-based), or undefined while it waits for one. */
  get slot(): number | undefined {
    return this.#held?.slot;
  }

  /** `undefined` while a slot is held; otherwise `gpu_full` with what the instance waits for. */
  refusal(): GpuSlotRefusal | undefined {
    if (this.#held) return undefined;
    const n = this.sessionsPerGpu;
    return {
      code: ReadinessCode.GpuFull,
      message:
        `${this.#closed ? 'this instance gave up its GPU session slot (closing)' : `all ${n} session slot${n === 1 ? '' : 's'} of GPU ${this.gpu} are held by other instances`} ` +
        `(gpu.sessions_per_gpu: ${n}, slots in ${this.dir}); this instance takes one as soon as one frees`,
    };
  }

  /** Calls `listener` with the held slot each time it changes (undefined: lost or given up); returns the unsubscribe function. */
  onChange(listener: (slot: number | undefined) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Gives the slot back (and stops waiting for one). Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#retry) clearTimeout(this.#retry);
    for (const child of this.#waiters.values()) release(child);
    this.#waiters.clear();
    if (this.#held) {
      release(this.#held.child);
      this.#held = undefined;
      this.#emit();
    }
  }

  /** The file of slot `k`. */
  file(k: number): string {
    return join(this.dir, `gpu-${this.gpu.replace(/[^A-Za-z0-9._-]/g, '_')}.slot-${k}.lock`);
  }

  /** Waits, in the kernel, on every slot not waited on yet; the first one granted is kept. */
  #compete(): void {
    if (this.#closed || this.#held) return;
    for (let k = 0; k < this.sessionsPerGpu; k++) if (!this.#waiters.has(k)) this.#wait(k);
  }

  #wait(k: number): void {
    // `cat` keeps the lock (inherited from flock) until its stdin, a pipe from this process, ends.
    const child = spawn(this.#flock, [this.file(k), '-c', 'echo held && exec cat'], { stdio: ['pipe', 'pipe', 'pipe'], detached: true });
    this.#waiters.set(k, child);
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-500)));
    child.stdout!.on('data', (d: Buffer) => {
      if (!d.toString().includes('held')) return;
      this.#granted(k, child);
    });
    // A spawn that fails (flock gone since open()) emits no exit: the same path as one.
    child.on('error', (err) => this.#exited(k, child, null, null, `${stderr}${err.message}`));
    child.stdin!.on('error', () => undefined);
    child.once('exit', (code, signal) => this.#exited(k, child, code, signal, stderr));
    // Neither the waiters nor the holder keep the process alive.
    child.unref();
    for (const s of [child.stdin, child.stdout, child.stderr]) (s as unknown as { unref?: () => void }).unref?.();
  }

  #granted(k: number, child: ChildProcess): void {
    this.#waiters.delete(k);
    if (this.#closed || this.#held) {
      release(child);
      return;
    }
    this.#held = { slot: k, child };
    for (const other of this.#waiters.values()) release(other);
    this.#waiters.clear();
    this.#log.info(`holds session slot ${k + 1} of ${this.sessionsPerGpu} of GPU ${this.gpu} (${this.file(k)})`);
    this.#emit();
  }

  #exited(k: number, child: ChildProcess, code: number | null, signal: NodeJS.Signals | null, stderr: string): void {
    if (this.#waiters.get(k) === child) this.#waiters.delete(k);
    if (this.#closed) return;
    if (this.#held?.child === child) {
      this.#held = undefined;
      this.#log.warn(`lost session slot ${k + 1} of GPU ${this.gpu}: its flock exited (${signal ?? `code ${code}`}); waiting for a slot again`);
      this.#emit();
      this.#compete();
      return;
    }
    if (this.#held || child.killed) return;
    // A waiter that failed on its own (the file unreadable, say): try again later, not in a loop.
    this.#log.warn(`waiting for session slot ${k + 1} of GPU ${this.gpu} failed (${signal ?? `code ${code}`}${stderr ? `: ${stderr.trim()}` : ''}); retrying`);
    this.#retry ??= setTimeout(() => {
      this.#retry = undefined;
      this.#compete();
    }, WAITER_RETRY_MS).unref();
  }

  #emit(): void {
    const slot = this.slot;
    for (const l of this.#listeners) l(slot);
  }
}

/** Ends a slot child: its stdin closed (so `cat` exits and the lock goes) and the flock process killed. */
function release(child: ChildProcess): void {
  child.stdin?.destroy();
  if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
}

/**
 * The GPU an instance's slots are keyed by when `gpu.device` does not say: the container
 * runtime's `NVIDIA_VISIBLE_DEVICES` (a UUID under Kubernetes' device plugin, the same for every
 * time-sliced replica of one card, with its default `envvar` device-list strategy), else
 * `CUDA_VISIBLE_DEVICES`, else `0`.
 */
export function gpuSlotKey(env: NodeJS.ProcessEnv = process.env): string {
  const nvidia = env['NVIDIA_VISIBLE_DEVICES']?.trim();
  // `all`/`none`/`void` name no card; a path is the device plugin's volume-mounts strategy (no id in the variable).
  if (nvidia && !['all', 'none', 'void'].includes(nvidia) && !nvidia.startsWith('/')) return nvidia;
  const cuda = env['CUDA_VISIBLE_DEVICES']?.trim();
  if (cuda) return cuda;
  return '0';
}
