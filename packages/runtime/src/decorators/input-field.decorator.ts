import { DecoratorMisuseError } from '../errors/errors.js';
import { type InputFieldOptions, recordInputField } from '../metadata/keys.js';

/**
 * Declares a field of an {@link InputState} (or of an `@event` params class). Public fields of
 * the state become `set_<field>` commands; constraints come from class-validator decorators on
 * the same field (`@IsString() @MaxLength(500)`, `@Min/@Max` for ge/le, `@MinLength/@MaxLength`,
 * `@IsIn([...])` for choices).
 *
 * @param options `default` (absent: the field is required), `defaultFactory` for mutable
 *   values, `description`, `moderate`.
 * @throws DecoratorMisuseError (`decorator_misuse`) on a static member or a method.
 * @example
 * @InputField({ default: 'A forest.', description: 'What the video shows.' }) @IsString() @MaxLength(500)
 * prompt!: string;
 */
export function InputField<T = unknown>(options: InputFieldOptions<T> = {}): PropertyDecorator {
  return (target, key) => {
    if (typeof target === 'function') throw new DecoratorMisuseError(`@InputField cannot decorate static member ${target.name}.${String(key)}`);
    if (typeof key !== 'string') throw new DecoratorMisuseError('@InputField needs a string property name, not a symbol');
    const descriptor = Object.getOwnPropertyDescriptor(target, key);
    if (descriptor && typeof descriptor.value === 'function') {
      throw new DecoratorMisuseError(`@InputField decorates fields, not methods (${target.constructor.name}.${key})`);
    }
    if (options === null || typeof options !== 'object')
      throw new DecoratorMisuseError(`@InputField options must be an object (${target.constructor.name}.${key})`);
    recordInputField(target, { property: key, options: { ...options }, hasDefault: 'default' in options || options.defaultFactory !== undefined });
  };
}
