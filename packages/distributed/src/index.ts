/**
 * `@reactor/distributed`: run a parallel model across several processes (one per GPU) in
 * lockstep, with shared-memory data paths and host collectives.
 */
export { DistributedRunner, DEFAULT_CALL_TIMEOUT_MS, DEFAULT_START_TIMEOUT_MS } from './runner/distributed-runner.js';
export type { DistributedRunnerOptions, RunnerLogger } from './runner/distributed-runner.js';
export { DistributedWorker } from './worker/distributed-worker.js';
export type { TypedArrayConstructor, WorkerClass } from './worker/distributed-worker.js';
export type { Collectives, TypedArray } from './collectives/types.js';
export { assignDevices, detectGpuCount, rankEnvironment } from './runner/devices.js';
export type { DeviceAssignment, DeviceRequest, VulkanBinding } from './runner/devices.js';
export { DEVICE_SELECT_LAYER, driPrimeTag, findDeviceSelectLayer, nvidiaPciAddresses, vulkanDeviceSelectEnv } from './runner/vulkan-device-select.js';
export type { DeviceSelectLayer } from './runner/vulkan-device-select.js';
export {
  CollectiveError,
  DistributedError,
  ProtocolError,
  RankDesyncError,
  RunnerStateError,
  RunnerUnusableError,
  SharedMemoryCapacityError,
  WorkerCrashedError,
  WorkerTimeoutError,
} from './errors.js';
export type { CrashInfo } from './errors.js';
export type { RankErrorFields } from './worker/error-codec.js';
