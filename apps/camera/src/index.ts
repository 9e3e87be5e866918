/**
 * The camera sample: a webcam track in, a per-frame effect computed by the ranks of a
 * `DistributedRunner` (each its band of rows), the transformed video out.
 */
export { CameraWorker, type EffectInput, type EffectResult, type CameraLoadArgs } from './camera-worker.js';
export { EFFECTS, type EffectName, type EffectParams, effectParams, applyEffectRows, boxBlurRows, edgeRows, cartoonRows, luma, rowShare } from './effects.js';
export { CameraErrorCode, CameraConfigError } from './errors.js';
export { waitingCard, CARD_TEXT, CARD_BACKGROUND } from './waiting-card.js';
