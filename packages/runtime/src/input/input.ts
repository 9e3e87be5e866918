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
