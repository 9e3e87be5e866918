/**
 * `@reactor/distributed/internal`: helpers for this package's tests and for sibling packages
 * that bind a GPU backend per rank. Not part of the public API; may change in any release.
 * @internal
 */
export { assignDevices, rankEnvironment } from './runner/devices.js';
export type { DeviceAssignment, VulkanBinding } from './runner/devices.js';
export { gpuCountFromEnv, machineGpuCount } from './runner/gpu-count.js';
export { DEVICE_SELECT_LAYER, driPrimeTag, findDeviceSelectLayer, nvidiaPciAddresses, vulkanDeviceSelectEnv } from './runner/vulkan-device-select.js';
export type { DeviceSelectLayer } from './runner/vulkan-device-select.js';
export { WORKER_PROCESS_TRANSITIONS, WorkerProcess } from './process/worker-process.js';
export type { WorkerProcessState } from './process/worker-process.js';
export { RANK_LOOP_TRANSITIONS, RankLoop } from './process/rank-loop.js';
export type { RankLoopState } from './process/rank-loop.js';
export { canTransition, transition } from './state-machine.js';
export type { TransitionTable } from './state-machine.js';
export { RankReusePool, installedRankPool, moduleTreeHash } from './runner/rank-reuse.js';
export { RankPool } from './runner/rank-pool.js';
export { chooseShmBackend, planLaunch } from './runner/launch-plan.js';
export type { LaunchNotice, LaunchOptions, LaunchPlan, LaunchRequest, LaunchWorker, MachineFacts, RankLaunch } from './runner/launch-plan.js';
export { alive, descendants } from './process/process-tree.js';
