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
 *
 * With `admit: 'deadline'` (`gpu.admit: deadline`) the holder of slot `k` also publishes its
 * session's frame times each second in `<dir>/gpu-<g>.slot-<k>.health.json` (written to a
 * temporary file and renamed over it, so a reader sees a whole file or the previous one), and an
 * idle holder refuses a new session (`gpu_busy`) while another holder's frame-time p99 is past
 * `deadlineP99Intervals - marginIntervals` frame intervals. A file not rewritten for
 * {@link GPU_HEALTH_STALE_MS} (its holder died, or hangs) is ignored.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { accessSync, constants, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
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
/** The admission modes of `gpu.admit`: `count` (the slots alone) or `deadline` (the slots, and the holders' frame deadlines). */
export const GPU_ADMIT_MODES = ['count', 'deadline'] as const;
export type GpuAdmitMode = (typeof GPU_ADMIT_MODES)[number];
/** `gpu.deadline_p99_intervals`' default: a session's frame-time p99 may be 1.5 frame intervals (issue 42). */
export const DEFAULT_DEADLINE_P99_INTERVALS = 1.5;
/** `gpu.deadline_margin_intervals`' default: a new session is admitted while every p99 is at most 1.25 intervals. */
export const DEFAULT_DEADLINE_MARGIN_INTERVALS = 0.25;
/** The largest `gpu.deadline_p99_intervals`. */
export const MAX_DEADLINE_P99_INTERVALS = 100;
/** A holder's health file older than this is ignored (it is rewritten every second while its instance lives), ms. */
export const GPU_HEALTH_STALE_MS = 3_000;

/** One session's frame times (`SessionFrameHealth` of `@reactor/runtime`, which the host reports each second). */
export interface GpuSessionHealth {
  session: string;
  /** The session's fps; undefined: it plays at the model's pace (no deadline). */
  fps: number | undefined;
  intervals: number;
  /** Frame-time p99 over the window, ms; undefined while too few frames were played to tell. */
  p99Ms: number | undefined;
  windowMs: number;
}

/** What a holder's health file says (`gpu-<g>.slot-<k>.health.json`, docs/gpu-selection.md). */
export interface GpuHealthFile {
  v: 1;
  gpu: string;
  /** The slot (0-based). */
  slot: number;
  /** `Date.now()` when written: older than {@link GPU_HEALTH_STALE_MS}, the file is ignored. */
  at: number;
  /** The running session's id, or null while the holder is idle. */
  session: string | null;
  fps: number | null;
  /** `1000 / fps`, ms. */
  intervalMs: number | null;
  p99Ms: number | null;
  /** `p99Ms / intervalMs`. */
  p99Intervals: number | null;
  intervals: number;
  windowMs: number;
}

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
  /** `count` (default): the slots alone; `deadline`: also no new session while a holder's frame-time p99 is past the bound. */
  admit?: GpuAdmitMode;
  /** The deadline: a session's frame-time p99 may be this many frame intervals (default 1.5; above 1, at most 100). */
  deadlineP99Intervals?: number;
  /** A new session is admitted while every holder's p99 is at most `deadlineP99Intervals - marginIntervals` (default 0.25; that stays at least 1). */
  marginIntervals?: number;
}

/** `gpu_slot_dir` or `gpu_slot_unavailable`: the lease cannot work on this machine. */
export class GpuSlotError extends DistributedError {}

/** The refusal a host reads while this instance holds no slot (`gpu_full`), or while a holder misses its deadline (`gpu_busy`). */
export interface GpuSlotRefusal {
  code: typeof ReadinessCode.GpuFull | typeof ReadinessCode.GpuBusy;
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
  readonly admit: GpuAdmitMode;
  readonly deadlineP99Intervals: number;
  readonly marginIntervals: number;
  readonly #flock: string;
  readonly #log: Logger;
  #held: { slot: number; child: ChildProcess } | undefined;
  readonly #waiters = new Map<number, ChildProcess>();
  readonly #listeners = new Set<(slot: number | undefined) => void>();
  #retry: NodeJS.Timeout | undefined;
  #closed = false;
  /** This instance's own session is past its deadline (logged once per crossing). */
  #late = false;

  private constructor(o: Required<Omit<GpuSlotOptions, 'logger'>> & { logger: Logger }) {
    this.sessionsPerGpu = o.sessionsPerGpu;
    this.gpu = o.gpu;
    this.dir = o.dir;
    this.admit = o.admit;
    this.deadlineP99Intervals = o.deadlineP99Intervals;
    this.marginIntervals = o.marginIntervals;
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
    const admit = options.admit ?? 'count';
    if (!(GPU_ADMIT_MODES as readonly unknown[]).includes(admit))
      throw new RangeError(`gpu.admit must be one of ${GPU_ADMIT_MODES.join(', ')}, got ${JSON.stringify(admit)}`);
    const deadlineP99Intervals = options.deadlineP99Intervals ?? DEFAULT_DEADLINE_P99_INTERVALS;
    const marginIntervals = options.marginIntervals ?? DEFAULT_DEADLINE_MARGIN_INTERVALS;
    const problem = deadlineProblem(deadlineP99Intervals, marginIntervals);
    if (problem) throw new RangeError(problem);
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
    const lease = new GpuSlotLease({
      sessionsPerGpu,
      dir,
      gpu: gpu.trim(),
      flock,
      admit,
      deadlineP99Intervals,
      marginIntervals,
      logger: options.logger ?? silentLogger,
    });
    lease.#compete();
    return lease;
  }

  /** The slot this instance holds (0-based), or undefined while it waits for one. */
  get slot(): number | undefined {
    return this.#held?.slot;
  }

  /**
   * `undefined` while a slot is held (and, with `admit: 'deadline'`, every other holder's session
   * meets the admission bound); otherwise `gpu_full` with what the instance waits for, or
   * `gpu_busy` naming the session that misses its deadline and its figures.
   */
  refusal(): GpuSlotRefusal | undefined {
    if (this.#held) return this.admit === 'deadline' ? this.#deadlineRefusal() : undefined;
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

  /** The admission bound: a new session is admitted while every holder's p99 is at most this many frame intervals. */
  get admitBoundIntervals(): number {
    return this.deadlineP99Intervals - this.marginIntervals;
  }

  /**
   * The host's report of its session's frame times (each second; `undefined` while no session
   * runs). With `admit: 'deadline'` and a slot held, it is written to this slot's health file.
   * A session past its own deadline is logged once per crossing: it is not stopped, new
   * sessions on the GPU are held off instead (docs/decisions.md).
   */
  report(health: GpuSessionHealth | undefined): void {
    if (this.admit !== 'deadline' || this.#closed || !this.#held) return;
    const file = this.#writeHealth(this.#held.slot, health);
    const over = file.p99Intervals !== null && file.p99Intervals > this.deadlineP99Intervals;
    if (over && !this.#late) {
      this.#log.warn(
        `session ${file.session} misses its frame deadline: frame-time p99 ${fmt(file.p99Ms!)} ms = ${fmt(file.p99Intervals!, 2)} frame intervals ` +
          `of ${fmt(file.intervalMs!)} ms (${fmt(file.fps!)} fps), past gpu.deadline_p99_intervals: ${this.deadlineP99Intervals}; it goes on, ` +
          `and no new session starts on GPU ${this.gpu} until it is back under ${fmt(this.admitBoundIntervals, 2)} intervals`,
      );
    } else if (!over && this.#late && file.session !== null) {
      this.#log.info(`session ${file.session} meets its frame deadline again (p99 ${fmt(file.p99Intervals ?? 0, 2)} frame intervals)`);
    }
    this.#late = over;
  }

  /** The health file of slot `k`. */
  healthFile(k: number): string {
    return this.file(k).replace(/\.lock$/, '.health.json');
  }

  /** Gives the slot back (and stops waiting for one). Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#retry) clearTimeout(this.#retry);
    for (const child of this.#waiters.values()) release(child);
    this.#waiters.clear();
    if (this.#held) {
      if (this.admit === 'deadline') rmSync(this.healthFile(this.#held.slot), { force: true });
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
    // A dead holder's file goes at once: this slot is idle now.
    if (this.admit === 'deadline') this.#writeHealth(k, undefined);
    this.#emit();
  }

  /** Writes slot `k`'s health file (a temporary file renamed over it); returns what it wrote. */
  #writeHealth(k: number, h: GpuSessionHealth | undefined): GpuHealthFile {
    const fps = h?.fps ?? null;
    const intervalMs = fps !== null ? 1000 / fps : null;
    const p99Ms = h?.p99Ms ?? null;
    const body: GpuHealthFile = {
      v: 1,
      gpu: this.gpu,
      slot: k,
      at: Date.now(),
      session: h?.session ?? null,
      fps,
      intervalMs,
      p99Ms,
      p99Intervals: p99Ms !== null && intervalMs !== null ? p99Ms / intervalMs : null,
      intervals: h?.intervals ?? 0,
      windowMs: h?.windowMs ?? 0,
    };
    const file = this.healthFile(k);
    const tmp = `${file}.${process.pid}.tmp`;
    try {
      writeFileSync(tmp, `${JSON.stringify(body)}\n`);
      renameSync(tmp, file);
    } catch (err) {
      this.#log.warn(`could not write the GPU health file ${file} (${(err as Error).message}); the other instances on GPU ${this.gpu} ignore it once stale`);
    }
    return body;
  }

  /**
   * `gpu_busy` when another holder's fresh health file shows a p99 past the admission bound. The
   * files are read at each call (a readiness probe, a client that would start a session): at
   * most 63 files of ~300 bytes.
   */
  #deadlineRefusal(): GpuSlotRefusal | undefined {
    let refusal: GpuSlotRefusal | undefined;
    for (let k = 0; k < this.sessionsPerGpu && !refusal; k++) {
      if (k === this.#held?.slot) continue;
      const h = readHealth(this.healthFile(k));
      if (!h || Date.now() - h.at > GPU_HEALTH_STALE_MS) continue;
      if (h.session === null || h.p99Intervals === null || h.p99Ms === null || h.intervalMs === null || h.fps === null) continue;
      if (h.p99Intervals <= this.admitBoundIntervals) continue;
      refusal = {
        code: ReadinessCode.GpuBusy,
        message:
          `session ${h.session} on GPU ${this.gpu} (slot ${k + 1}) has frame-time p99 ${fmt(h.p99Ms)} ms = ${fmt(h.p99Intervals, 2)} frame intervals ` +
          `of ${fmt(h.intervalMs)} ms (${fmt(h.fps)} fps) over the last ${fmt(h.windowMs / 1000)} s, past the admission bound of ` +
          `${fmt(this.admitBoundIntervals, 2)} (gpu.deadline_p99_intervals: ${this.deadlineP99Intervals} less gpu.deadline_margin_intervals: ${this.marginIntervals}); ` +
          'a new session would slow it further: this instance takes one once it is back under',
      };
    }
    return refusal;
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

/** A health file's contents, or undefined when it is missing or not one (a reader never throws). */
function readHealth(file: string): GpuHealthFile | undefined {
  try {
    const h = JSON.parse(readFileSync(file, 'utf8')) as GpuHealthFile;
    return h !== null && typeof h === 'object' && h.v === 1 && typeof h.at === 'number' ? h : undefined;
  } catch {
    return undefined;
  }
}

/** A figure for a message: at most `digits` decimals (1 for ms and fps, 2 for frame intervals). */
function fmt(n: number, digits = 1): string {
  const f = 10 ** digits;
  return String(Math.round(n * f) / f);
}

/**
 * Why a deadline and margin do not fit (`gpu.deadline_p99_intervals`, `gpu.deadline_margin_intervals`), or undefined.
 * The deadline is above 1 frame interval (a p99 of exactly one interval is a perfect stream) and at most 100; the bound
 * it leaves (deadline less margin) is at least 1.
 */
export function deadlineProblem(deadline: number, margin: number): string | undefined {
  if (typeof deadline !== 'number' || !Number.isFinite(deadline) || deadline <= 1 || deadline > MAX_DEADLINE_P99_INTERVALS) {
    return `gpu.deadline_p99_intervals must be a number of frame intervals above 1 and at most ${MAX_DEADLINE_P99_INTERVALS}, got ${JSON.stringify(deadline)}`;
  }
  if (typeof margin !== 'number' || !Number.isFinite(margin) || margin < 0 || deadline - margin < 1) {
    return `gpu.deadline_margin_intervals must be a number from 0 to ${fmt(deadline - 1, 2)} (gpu.deadline_p99_intervals less 1: the admission bound stays at least 1 frame interval), got ${JSON.stringify(margin)}`;
  }
  return undefined;
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
