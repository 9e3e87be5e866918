import type { AppOptions } from '../app/app-options.js';
import type { INPUT_TRACKS, MESSAGE_TYPES, ReactorApp } from '../app/reactor-app.js';
import type { Input, InputBuffers } from '../input/input.js';
import { DecoratorMisuseError } from '../errors/errors.js';
import { recordAppOptions } from '../metadata/keys.js';
import type { InputState } from '../state/input-state.js';

/**
 * Declares, once, what an app is made of: its state class, output class, message classes,
 * playout `fps`, `bufferSize` and name. Type-checked against the app's
 * `ReactorApp<State, Input, Result, Message, Tracks>`: `state` must be its `State`, `messages`
 * must list every class of its `Message` union, and `input` must be a class with every track of
 * its `Tracks`. Checked in full when the app is registered.
 *
 * @example
 * @reactorApp({ state: VideoState, output: VideoOutput, fps: 16, bufferSize: 32, messages: [Notice] })
 * export class VideoApp extends ReactorApp<VideoState, VideoInput, VideoResult> { … }
 */
export function reactorApp<S extends InputState, const L extends ReadonlyArray<new (...args: any[]) => object> = readonly [], T extends Input = Input>(
  options: AppOptions<S, T> & { messages?: L },
) {
  return <
    C extends new () => ReactorApp<S, any, any, any, any> & {
      readonly [MESSAGE_TYPES]?: () => InstanceType<L[number]>;
      readonly [INPUT_TRACKS]?: (tracks: InputBuffers<T>) => void;
    },
  >(
    target: C,
  ): void => {
    if (typeof target !== 'function') throw new DecoratorMisuseError('@reactorApp decorates classes');
    if (options === null || typeof options !== 'object') throw new DecoratorMisuseError(`@reactorApp options must be an object (${target.name})`);
    recordAppOptions(target, { ...options });
  };
}
