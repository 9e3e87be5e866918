import type { InputBuffer } from './input-buffer.js';

/**
 * The inbound half of an app's media: extend {@link Input} and declare the tracks clients may
 * publish to the app (`@Video()` for a camera, `@Audio()` for a microphone); name the class in
 * `@reactorApp({ input: CamInput })`.
 *
 * @example
 * class CamInput extends Input {
 *   @Video({ width: 640, height: 480, fps: 30 }) webcam!: InputBuffer;
 *   @Audio({ sampleRate: 48000 }) mic!: InputBuffer;
 * }
 */
export class Input {}

/**
 * The type of `this.input` in an app typed with its `Input` class (the fifth type parameter of
 * `ReactorApp`): each track property of `T` as an {@link InputBuffer} (a property typed
 * `InputBuffer<Uint8Array>` keeps its frame type; any other type becomes a plain `InputBuffer`).
 *
 * @example
 * class CamInput extends Input {
 *   @Video() webcam!: InputBuffer<Uint8Array>;
 * }
 * // InputBuffers<CamInput> is { readonly webcam: InputBuffer<Uint8Array> }
 */
export type InputBuffers<T extends Input> = {
  readonly [K in keyof T as K extends string ? (T[K] extends (...args: never[]) => unknown ? never : K) : never]-?: NonNullable<T[K]> extends InputBuffer<
    infer D
  >
    ? InputBuffer<D>
    : InputBuffer;
};
