/**
 * Why an instance is not ready: `ReadinessCode` is a code registry of the wire (`/health/ready`
 * answers it), so it lives in `@reactor/protocol`; re-exported here for the host and apps.
 */
export { ReadinessCode } from '@reactor/protocol';
