import { DecoratorMisuseError } from '../errors/errors.js';
import { type UploadFieldOptions, recordInputField } from '../metadata/keys.js';
import { InputState } from '../state/input-state.js';
import { isMimePattern } from '../upload/sniff.js';

/**
 * Declares a field that takes an uploaded file ({@link UploadedFile}): on an {@link InputState}
 * (a public upload slot, `null` until a client sets it, with a generated `set_<field>`) or on
 * an `@event` params class (a required parameter). A command carries a reference,
 * `{"image": {"uploadId": "..."}}` (from `POST /uploads`); the host resolves it to the file
 * before validation, waiting for bytes still arriving, and refuses a file that does not fit
 * (`upload_rejected`). The schema shows the field as an upload reference with an
 * `x-reactor-upload: { maxBytes?, mimeTypes }` marker.
 *
 * @param options `maxBytes` (largest file), `mimeTypes` (accepted types, `image/*` for a family), `description`.
 * @throws DecoratorMisuseError (`decorator_misuse`) on a static member, a method, or bad options.
 * @example
 * class SetImageParams {
 *   @UploadField({ maxBytes: 10_000_000, mimeTypes: ['image/*'], description: 'The start picture.' })
 *   image!: UploadedFile;
 * }
 */
export function UploadField(options: UploadFieldOptions = {}): PropertyDecorator {
  return (target, key) => {
    if (typeof target === 'function') throw new DecoratorMisuseError(`@UploadField cannot decorate static member ${target.name}.${String(key)}`);
    if (typeof key !== 'string') throw new DecoratorMisuseError('@UploadField needs a string property name, not a symbol');
    const where = `${target.constructor.name}.${key}`;
    const descriptor = Object.getOwnPropertyDescriptor(target, key);
    if (descriptor && typeof descriptor.value === 'function') throw new DecoratorMisuseError(`@UploadField decorates fields, not methods (${where})`);
    if (options === null || typeof options !== 'object') throw new DecoratorMisuseError(`@UploadField options must be an object (${where})`);
    const { maxBytes, mimeTypes, description } = options;
    if (maxBytes !== undefined && !(Number.isSafeInteger(maxBytes) && maxBytes > 0)) {
      throw new DecoratorMisuseError(`@UploadField maxBytes must be a positive integer (bytes), got ${JSON.stringify(maxBytes)} (${where})`);
    }
    if (mimeTypes !== undefined && (!Array.isArray(mimeTypes) || mimeTypes.length === 0 || !mimeTypes.every(isMimePattern))) {
      throw new DecoratorMisuseError(
        `@UploadField mimeTypes must be a non-empty list of lower-case types such as "image/png" or "image/*", got ${JSON.stringify(mimeTypes)} (${where})`,
      );
    }
    if (description !== undefined && typeof description !== 'string') throw new DecoratorMisuseError(`@UploadField description must be a string (${where})`);
    // A state field is an upload slot that starts empty; a parameter is required.
    const inState = target instanceof InputState;
    recordInputField(target, {
      property: key,
      options: { ...(inState ? { default: null } : {}), ...(description !== undefined ? { description } : {}) },
      hasDefault: inState,
      upload: { maxBytes, mimeTypes: mimeTypes ? Object.freeze([...mimeTypes]) : undefined },
    });
  };
}
