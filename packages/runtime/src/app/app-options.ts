import type { Input } from '../input/input.js';
import type { Output } from '../output/output.js';
import type { InputState } from '../state/input-state.js';

/** What `@reactorApp({...})` declares about an app. Every member is optional. */
export interface AppOptions<S extends InputState = InputState, T extends Input = Input> {
  /** The session state class (extends `InputState`). Default: an empty state. */
  state?: new () => S;
  /** The `Output` subclass that declares the tracks. Default: none (the app emits no media). */
  output?: new (...args: any[]) => Output;
  /** The `Input` subclass that declares the tracks clients publish to the app (camera, microphone). Default: none. */
  input?: new (...args: any[]) => T;
  /** Message classes the app sends; wire name = snake_case class name. */
  messages?: ReadonlyArray<new (...args: any[]) => object>;
  /** Pins the playout rate (frames per second) of every track; default: frames / measured `generate()` time. */
  fps?: number;
  /** How many frames the model may run ahead of playout, per track (at least one emitted batch). Default 16. */
  bufferSize?: number;
  /** Published app name; default: the class name. */
  name?: string;
  /** Published app version; default `0.0.0`. */
  version?: string;
  description?: string;
}
