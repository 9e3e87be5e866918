import { DecoratorMisuseError } from '../errors/errors.js';
import { type HookKind, recordHook } from '../metadata/keys.js';

function hook(kind: HookKind): MethodDecorator {
  return (target, key, descriptor) => {
    if (typeof target === 'function') throw new DecoratorMisuseError(`@${kind} cannot decorate static method ${target.name}.${String(key)}`);
    if (typeof key !== 'string') throw new DecoratorMisuseError(`@${kind} needs a string method name, not a symbol`);
    if (typeof descriptor.value !== 'function') throw new DecoratorMisuseError(`@${kind} decorates methods; ${target.constructor.name}.${key} is not one`);
    recordHook(target, { kind, method: key });
  };
}

/**
 * Runs the method when a session starts (fresh state already built), before the first
 * `@connected`. Sync or async; a throw is logged, not fatal.
 */
export const sessionStarted: MethodDecorator = hook('sessionStarted');
/** Runs the method when a session ends (after the grace period, a fatal step or `host.close()`), before the state is dropped. */
export const sessionEnded: MethodDecorator = hook('sessionEnded');
/** Runs `method(client)` after a client joined the session. */
export const connected: MethodDecorator = hook('connected');
/** Runs `method(client)` after a client left. */
export const disconnected: MethodDecorator = hook('disconnected');
/**
 * Runs `method(track, client)` once a client publishes an inbound track (its buffer, reopened and
 * empty, fills from now on): after that client's `@connected`, under the step lock like every hook.
 * `track` is the wire name (`'webcam'`).
 */
export const trackPublished: MethodDecorator = hook('trackPublished');
/**
 * Runs `method(track, client)` once a track's publisher unpublishes it, leaves, or the session
 * ends (its buffer is closed by then): for every `@trackPublished`, exactly one
 * `@trackUnpublished`, before that client's `@disconnected`.
 */
export const trackUnpublished: MethodDecorator = hook('trackUnpublished');
/**
 * Runs `method(file, client?)` when an upload's bytes are complete and stored: `file` is the
 * {@link UploadedFile}; `client` is the uploader when its announcement named its `clientId` and
 * that client is in the session. Runs between steps, like every hook.
 */
export const fileUploaded: MethodDecorator = hook('fileUploaded');
