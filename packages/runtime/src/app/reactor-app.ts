import { type Logger, silentLogger } from '@reactor/log';
import type { ClipResult } from '@reactor/protocol';
import { InvalidOutputError, NoSessionError, ReactorError, RuntimeErrorCode } from '../errors/errors.js';
import type { Input as InboundTracks, InputBuffers } from '../input/input.js';
import type { InputBuffer } from '../input/input-buffer.js';
import type { LoadContext } from './contract.js';
import { Output } from '../output/output.js';
import type { InputState } from '../state/input-state.js';
import type { StepOutcome } from './step-outcome.js';
import { hostContext, resolveWeightsPath } from './weights.js';

/** @internal What a host plugs into an app instance. */
export interface AppBinding {
  state(): InputState | undefined;
  send(message: object): void;
  flush(): void;
  /** `this.output.clip()`: the transport's clip ring, when it keeps one. */
  clip(options: ClipOptions): Promise<ClipResult>;
  broadcastState(): void;
  readonly weightsPath: string | undefined;
  readonly logger: Logger;
  /** `this.input`: one buffer per inbound track, by property name. */
  readonly input: Readonly<Record<string, InputBuffer>>;
  /** The running step's restart switch (`this.restartSignal`). */
  restartSignal(): AbortSignal | undefined;
}

/**
 * One reason an app gives for not being ready: a stable snake_case `code` (one of
 * `ReadinessCode`'s, e.g. `runner_unhealthy`, `rank_stalled`, `runner_restarting`, or the app's
 * own) and a message for the operator.
 */
export interface AppNotReadyReason {
  readonly code: string;
  readonly message: string;
}

/**
 * What {@link ReactorApp.readiness} returns: `true` when the app can take users, otherwise the
 * reason it cannot (a string, reported as `app_not_ready`, or a {@link AppNotReadyReason} with
 * its own code), or several reasons.
 */
export type AppReadiness = true | string | AppNotReadyReason | readonly (string | AppNotReadyReason)[];

/** @internal */
export const APP_BINDING: unique symbol = Symbol('reactor:app-binding');

/**
 * @internal Type-only key: an app's message types as a covariant member, so `@reactorApp`
 * can check that every type `send()` accepts is listed in `messages`. Never set at runtime.
 */
export declare const MESSAGE_TYPES: unique symbol;

/**
 * @internal Type-only key: the app's input tracks, as a method's parameter (checked both ways
 * where a host takes any app, strictly where `@reactorApp({ input })` checks that the declared
 * `Input` class has every track the app reads). Never set at runtime.
 */
export declare const INPUT_TRACKS: unique symbol;

/** `this.input` of an app outside a host (or without inbound tracks). */
const NO_INPUT: Readonly<Record<string, InputBuffer>> = Object.freeze({});

/** Playout control of an app (`this.output`). */
export interface OutputControl {
  /**
   * Drops every queued frame on every track, releases a step waiting for room (its batch is
   * dropped too) and tells clients to cut (`flush` message). Call it on every reset.
   */
  flush(): void;
  /**
   * Takes a clip of the last `seconds` of this session's output (an MP4 of the encoded video
   * and audio the server keeps in its clip ring), as a client's `clip` message does.
   * @throws ReactorError `clips_disabled` (no ring: set `recording:` in reactor.yaml), and the
   *   server's `clip_unavailable`, `clip_failed` codes.
   * @example
   * const { url } = await this.output.clip({ seconds: 10 });
   * this.send({ type: 'highlight', url });
   */
  clip(options?: ClipOptions): Promise<ClipResult>;
}

/** Options of {@link OutputControl.clip}. */
export interface ClipOptions {
  /** Seconds to keep (default: the whole ring). */
  seconds?: number;
  /** Outbound video track name (default: the first). */
  track?: string;
}

/**
 * Base class of an app. Override `generate()` (and, as needed, `load()`, `processInput()`,
 * `processOutput()`), declare commands with `@event` and hooks with `@sessionStarted`,
 * `@sessionEnded`, `@connected`, `@disconnected`, and declare the state/output classes with
 * `@reactorApp({...})`. See `docs/runtime.md`.
 *
 * @typeParam State   the `InputState` subclass (`this.state`)
 * @typeParam Input   what `processInput()` returns and `generate()` takes
 * @typeParam Result  what `generate()` returns
 * @typeParam Message the message classes the app sends, as a union (`Notice | BackendInfo`);
 *   `send()` accepts only these, and `@reactorApp({ messages })` must list each. Default: none.
 * @typeParam Tracks  the app's `Input` class (`CamInput`), which types `this.input`;
 *   `@reactorApp({ input })` must name a class with every one of its tracks. Default: no tracks.
 */
export abstract class ReactorApp<
  State extends InputState = InputState,
  Input = State,
  Result = unknown,
  Message extends object = never,
  Tracks extends InboundTracks = InboundTracks,
> {
  /** @internal */
  [APP_BINDING]: AppBinding | undefined;
  /** @internal Type-only (see {@link MESSAGE_TYPES}). */
  declare readonly [MESSAGE_TYPES]?: () => Message;
  /** @internal Type-only (see {@link INPUT_TRACKS}); a method's type, so any app still fits `ReactorApp<any, any, any, any>`. */
  declare readonly [INPUT_TRACKS]?: { check(tracks: InputBuffers<Tracks>): void }['check'];

  /** The live session's state. @throws NoSessionError (`no_session`) outside a session. */
  get state(): State {
    const s = this[APP_BINDING]?.state();
    if (s === undefined) {
      throw new NoSessionError(`${this.constructor.name}.state was read while no session exists; state lives from @sessionStarted to @sessionEnded`);
    }
    return s as State;
  }

  /**
   * The host's logger, as a child bound to the app's class name (`{ app: 'VideoApp' }`); also in
   * the constructor. Outside a host: a logger that drops every line.
   */
  get logger(): Logger {
    return this[APP_BINDING]?.logger ?? hostContext.getStore()?.logger ?? silentLogger;
  }

  /**
   * The inbound tracks clients publish to the app: one {@link InputBuffer} per track property of
   * the app's `Input` class (`this.input.webcam`), the same buffers for the host's whole life
   * (reset at every session's end). Typed by the fifth type parameter:
   * `class CamApp extends ReactorApp<CamState, CamInput, Result, never, CamInputTracks>`.
   *
   * @example
   * const [frame] = await this.input.webcam.read({ mode: 'latest', timeoutMs: 1000 });
   */
  get input(): InputBuffers<Tracks> {
    return (this[APP_BINDING]?.input ?? NO_INPUT) as InputBuffers<Tracks>;
  }

  /**
   * During `generate()`: aborts when an urgent state field changes (`@InputField({ urgent: true })`)
   * while this step runs, so the frames it makes would show the old value. Pass it to the runner
   * call (`runner.generate(input, { signal: this.restartSignal })`): the call is cancelled, the
   * step is dropped and runs again with the new value. Undefined outside a step.
   */
  get restartSignal(): AbortSignal | undefined {
    return this.urgent ? this[APP_BINDING]?.restartSignal() : undefined;
  }

  /**
   * Whether this app's urgent fields act as urgent (default true). An app may switch it from its
   * config in `load()` (the world app's `urgent: false`, to measure the difference).
   */
  urgent = true;

  /**
   * Steps in flight (issue 39): how many `generate()` calls the step loop dispatches before it
   * processes the oldest one's outcome, 1..{@link MAX_IN_FLIGHT} (default 1: each step's
   * `generate()` returns before the next `processInput()`). An app on a `DistributedRunner` sets
   * it in `load()` from its config, with the runner's `maxInFlight` the same; outcomes are still
   * processed in order, and a command that needs the model between calls (an event, a rewind, a
   * snapshot, a session's end) waits for the calls in flight to finish (docs/runtime.md).
   * @throws HostOptionError (`invalid_host_option`) from `AppHost.load()` when out of range
   */
  inFlight = 1;

  /** Playout control (`this.output.flush()`). */
  get output(): OutputControl {
    return {
      flush: () => this[APP_BINDING]?.flush(),
      clip: (options = {}) => {
        const b = this[APP_BINDING];
        if (!b)
          return Promise.reject(new ReactorError(RuntimeErrorCode.ClipsDisabled, 'this app runs outside a host, so there is no clip ring to take a clip from'));
        return b.clip(options);
      },
    };
  }

  /**
   * Called once before any client. Build and start the model here. `context` carries the app's
   * config file (`runtime.config` or `--config`), the GPU count the manifest declares, and the
   * host's logger.
   */
  load(_context: LoadContext): void | Promise<void> {}

  /**
   * Called once when the host closes (server shutdown, SIGINT/SIGTERM), after the last
   * session has ended and its `@sessionEnded` hooks ran — also when `load()` failed or was
   * still running. Release what `load()` built here (shut a `DistributedRunner` down). A throw
   * is logged; closing goes on.
   */
  unload(): void | Promise<void> {}

  /**
   * Whether the app can take users now: `true`, or the reason it cannot, several as an array:
   * `{ code, message }` with a `ReadinessCode` (`{ code: ReadinessCode.RunnerRestarting, message:
   * 'the runner is restarting' }`) or the app's own snake_case code, or a bare string (reported
   * as `app_not_ready`). The host adds each reason to its readiness (`/health/ready`, the
   * `reactor_not_ready{reason}` metric); it asks only once `load()` succeeded. Called on every
   * readiness probe: keep it cheap and synchronous. A throw counts as not ready. Default: `true`.
   */
  readiness(): AppReadiness {
    return true;
  }

  /**
   * A standing notice for viewers while the app is loaded (`status.notice`, shown by the viewer),
   * e.g. that the weights are generated and the picture is noise. Called whenever the status is
   * built: keep it cheap and synchronous. A throw or an empty string counts as none. Default: none.
   */
  notice(): string | undefined {
    return undefined;
  }

  /** Builds the model input; throw `ApplicationError(reason)` to refuse the step. Default: the state. */
  processInput(): Input | Promise<Input> {
    return this.state as unknown as Input;
  }

  /** Runs the model once. Errors it throws become `StepOutcome.error`. */
  abstract generate(input: Input): Result | Promise<Result>;

  /**
   * Turns the step's outcome into media to emit (or `null`/`undefined` for none). Default:
   * rethrow the model's error (ending the session), emit the result if it is an `Output`.
   * A throw from here ends the session with an error that clients are told about.
   */
  processOutput(outcome: StepOutcome<Result>): Output | null | undefined | Promise<Output | null | undefined> {
    if (outcome.error !== undefined) throw outcome.error;
    const r = outcome.result;
    if (r === undefined || r === null) return null;
    if (r instanceof Output) return r;
    throw new InvalidOutputError(
      `${this.constructor.name}.generate() returned ${(r as object).constructor?.name ?? typeof r}, not an Output; return an Output from generate() or override processOutput() to build one`,
    );
  }

  /**
   * Broadcasts a declared message to every client of the session whose `@connected` hooks ran.
   * Only the app's `Message` types compile; the host checks again at runtime.
   * @throws MessageNotDeclaredError (`message_not_declared`) for a class not in `@reactorApp({ messages })`.
   */
  send(message: Message): void {
    this[APP_BINDING]?.send(message);
  }

  /** Broadcasts the full public state (`state` message), e.g. after an event changed it. */
  broadcastState(): void {
    this[APP_BINDING]?.broadcastState();
  }

  /**
   * Optional, with `@reactorApp({ snapshot })`: the app's model state for a session snapshot
   * (typed arrays and plain data), taken between steps; usually `this.runner.snapshot()`. The
   * host adds the `InputState` and the declared `snapshot.fields` itself. docs/snapshots.md.
   */
  snapshot?(): unknown;

  /**
   * Optional, beside {@link snapshot}: puts back what it returned (a rewind; typed arrays are
   * copies the app owns). Throw `SnapshotError` (`snapshot_world_size`, ...) to refuse one; the
   * session then goes on unchanged.
   */
  restore?(model: unknown): void | Promise<void>;

  /** See {@link getWeightsPath}. @throws WeightsPathNotSetError */
  getWeightsPath(): string {
    return resolveWeightsPath(this[APP_BINDING]?.weightsPath);
  }
}

/** The most steps an app may keep in flight ({@link ReactorApp.inFlight}); the runner's `maxInFlight` bound too. */
export const MAX_IN_FLIGHT = 8;
