/**
 * `@reactor/distributed`: run a parallel model across several processes (one per GPU) in
 * lockstep, with shared-memory data paths and host collectives.
 */
export { DistributedRunner, RUNNER_TRANSITIONS } from './runner/distributed-runner.js';
export type { CallOptions, DistributedRunnerEvents, RankExitInfo, RunnerStateName, SharedResult, StallInfo } from './runner/distributed-runner.js';
export { DEFAULT_CALL_TIMEOUT_MS, DEFAULT_CANCEL_TIMEOUT_MS, DEFAULT_STALL_MS, DEFAULT_START_TIMEOUT_MS } from './runner/options.js';
export type { DistributedRunnerOptions } from './runner/options.js';
export { RUNNER_CALL_CHANNEL, RUNNER_GPU_CHANNEL, RUNNER_PROGRESS_CHANNEL } from './runner/runner-channels.js';
export type { RankGpuBusy, RunnerCallTiming, RunnerLoadProgress } from './runner/runner-channels.js';
export { MAX_PROGRESS_STAGE_CHARS } from './worker/progress-report.js';
export { SelfHealingRunner } from './runner/self-healing-runner.js';
export type { SelfHealingRunnerOptions } from './runner/self-healing-runner.js';
export { DistributedWorker } from './worker/distributed-worker.js';
export { SnapshotUnsupportedError } from './worker/snapshot-calls.js';
export {
  DEFAULT_PYTHON,
  PYTHON_ENV,
  PYTHON_PACKAGE_DIR,
  PYTHON_PATH_ENV,
  PYTHON_WORKER_ENV,
  findExecutable,
  isPythonWorkerSpec,
  pythonInterpreter,
  pythonWorker,
} from './python/python-worker.js';
export type { HalfPrecision, PythonWorkerOptions, PythonWorkerSpec } from './python/python-worker.js';
export type { TypedArrayConstructor, WorkerClass } from './worker/distributed-worker.js';
export type { Collectives, TypedArray } from './collectives/types.js';
export { detectGpuCount } from './runner/gpu-count.js';
export {
  DEFAULT_DEADLINE_MARGIN_INTERVALS,
  DEFAULT_DEADLINE_P99_INTERVALS,
  DEFAULT_GPU_SLOT_DIR,
  GPU_ADMIT_MODES,
  GpuSlotError,
  GpuSlotLease,
  MAX_DEADLINE_P99_INTERVALS,
  MAX_SESSIONS_PER_GPU,
  gpuSlotKey,
} from './runner/gpu-slots.js';
export type { GpuAdmitMode, GpuHealthFile, GpuSessionHealth, GpuSlotOptions, GpuSlotRefusal } from './runner/gpu-slots.js';
export type { DeviceRequest } from './runner/devices.js';
export { FAULT_CRASH_EXIT_CODE, FAULT_KINDS, FAULTS_ENV } from './faults.js';
export type { FaultKind, FaultSpec } from './faults.js';
export type { ProgressPhase } from './shm/progress.js';
export {
  CallAbortedError,
  CollectiveError,
  DistributedError,
  DistributedErrorCode,
  IllegalTransitionError,
  InjectedFaultError,
  ProtocolError,
  PythonWorkerError,
  RankDesyncError,
  RunnerOptionError,
  RunnerStateError,
  RunnerUnusableError,
  SharedMemoryCapacityError,
  WorkerCrashedError,
  WorkerStalledError,
  WorkerTimeoutError,
} from './errors.js';
export type { CrashInfo, CrashPhase } from './errors.js';
export type { RankErrorFields } from './worker/error-codec.js';
