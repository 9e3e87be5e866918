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
  /**
   * When each step starts. `just-in-time` (default): when the frames already queued are about to
   * run out (the step's measured duration ahead), so it reads the newest commands and input and
   * its frames are due soon after they are made; a model faster than `fps` keeps about one frame
   * queued. `ahead`: at once, running up to `bufferSize` frames ahead of playout (the Python
   * original's way: the smoothest output for a model whose step time varies, at the price of
   * `bufferSize / fps` of latency).
   */
  pacing?: 'just-in-time' | 'ahead';
  /** Published app name; default: the class name. */
  name?: string;
  /** Published app version; default `0.0.0`. */
  version?: string;
  description?: string;
  /**
   * Session snapshots (docs/snapshots.md): the host keeps a ring of them and offers the
   * built-in `rewind` command. The app's `InputState` is always captured; `fields` names the
   * app's own properties to capture too, and the app's `snapshot()` / `restore()` add its model
   * state. Default: no snapshots.
   */
  snapshot?: SnapshotOptions;
}

/** `@reactorApp({ snapshot })`: what a snapshot holds and how the rewind ring keeps them. */
export interface SnapshotOptions {
  /** The app's own properties (plain data, typed arrays) captured beside its state. Default: none. */
  fields?: readonly string[];
  /** Take a snapshot before every Nth step that makes output. Default 8. */
  everySteps?: number;
  /** Bytes the rewind ring may hold (oldest dropped first). Default 64 MiB. */
  ringBytes?: number;
  /** The largest one snapshot may be, bytes (`snapshot_too_big` past it). Default 32 MiB. */
  maxBytes?: number;
  /** Roles that may send `rewind`. Default `['controller']`. */
  rewindRoles?: readonly string[];
  /** Rewinds a session may make per second, sustained (bursts of 3). Default 2. */
  rewindsPerSecond?: number;
}
