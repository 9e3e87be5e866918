/**
 * The seed page's multi-GPU example: `VideoApp` (TypeScript) whose worker is the page's
 * `video_worker.py` (Python ranks, PyTorch). `reactor run --manifest apps/seed-video/reactor.yaml`.
 */
export { DEFAULT_WORLD_SIZE, RolloutExhausted, VideoApp, VideoOutput, VideoState, WORKER_DIR } from './app.js';
export type { VideoInput, VideoResult } from './app.js';
