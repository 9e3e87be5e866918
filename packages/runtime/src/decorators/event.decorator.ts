import { DecoratorMisuseError } from '../errors/errors.js';
import { type EventOptions, recordEvent } from '../metadata/keys.js';
import type { Client } from '../session/client.js';

/** The method an `@event` with params class `P` decorates: `(params: P, client) => result`. */
export type EventHandler<P extends object> = (params: P, client: Client<any>) => unknown;

/**
 * Turns a method of the app into a command. The handler is called between steps as
 * `handler(params, client)`: `params` is a validated instance of `options.params` (an empty
 * object when the event has none), `client` is who sent it. Its return value is the reply's
 * `result` (to the sender only); `throw new CommandError(code, message)` answers with that code;
 * any other throw answers `internal_error`. An event named like a generated setter (`set_prompt`)
 * replaces it.
 *
 * The handler's type is checked against `options.params`: its first parameter must take an
 * instance of that class (any object when there is none).
 *
 * @throws DecoratorMisuseError (`decorator_misuse`) on a field or a static method.
 * @example
 * @event({ name: 'reset', description: 'Start a new rollout.' })
 * async reset() { await this.runner.reset(); this.output.flush(); }
 */
export function event<P extends object = object>(
  options: EventOptions<P> = {},
): (target: object, key: string | symbol, descriptor: { value?: EventHandler<P> }) => void {
  return (target, key, descriptor) => {
    if (typeof target === 'function') throw new DecoratorMisuseError(`@event cannot decorate static method ${target.name}.${String(key)}`);
    if (typeof key !== 'string') throw new DecoratorMisuseError('@event needs a string method name, not a symbol');
    if (typeof descriptor.value !== 'function') throw new DecoratorMisuseError(`@event decorates methods; ${target.constructor.name}.${key} is not one`);
    if (options.params !== undefined && typeof options.params !== 'function') {
      throw new DecoratorMisuseError(`@event params must be a class (${target.constructor.name}.${key})`);
    }
    if (options.urgent !== undefined && typeof options.urgent !== 'boolean') {
      throw new DecoratorMisuseError(`@event urgent must be true or false (${target.constructor.name}.${key}), got ${JSON.stringify(options.urgent)}`);
    }
    recordEvent(target, { method: key, options: { ...options } });
  };
}
