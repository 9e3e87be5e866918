/**
 * The error codes of `@reactor/agones`: a bad option, and the SDK sidecar failing a call (logged
 * with the code; the instance keeps serving and retries). `docs/errors.md` lists each with its fix.
 */

/** Every error code `@reactor/agones` produces. */
export const AgonesErrorCode = {
  /** An Agones option (manifest `agones:` section, `--agones`, `startAgones()`) is out of range or of the wrong type. */
  InvalidOption: 'invalid_agones_option',
  /** The SDK sidecar did not answer (not running, wrong `AGONES_SDK_GRPC_PORT`, gone): logged, retried. */
  SdkUnreachable: 'agones_sdk_unreachable',
  /** The sidecar answered a call with an error (e.g. a label Kubernetes refuses): logged, retried on the next change. */
  SdkCallFailed: 'agones_sdk_call_failed',
} as const;
export type AgonesErrorCode = (typeof AgonesErrorCode)[keyof typeof AgonesErrorCode];
