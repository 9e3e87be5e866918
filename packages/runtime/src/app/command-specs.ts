/** The commands of an app: a setter per public state field and its `@event` methods, compiled, with their roles. */
import type { CommandSchema, JsonSchema } from '@reactor/protocol';
import { AppDefinitionError, RuntimeErrorCode } from '../errors/errors.js';
import { type AnyClass, readEvents } from '../metadata/keys.js';
import { WIRE_NAME_PATTERN, toSnakeCase } from '../metadata/naming.js';
import { type FieldSpec, FieldSet } from '../state/field-set.js';
import type { InputState } from '../state/input-state.js';

/** A command, compiled. */
export interface CommandSpec {
  readonly name: string;
  readonly kind: 'setter' | 'event';
  /** Setter: the state field. */
  readonly field?: FieldSpec;
  /** Event: the method and its params. */
  readonly method?: string;
  readonly params?: FieldSet;
  /** Roles whose clients may send it (default `['controller']`). */
  readonly roles: readonly string[];
  readonly schema: CommandSchema;
  /**
   * Urgent (issue 39): a setter of an `@InputField({ urgent: true })` field, or an
   * `@event({ urgent: true })`; it supersedes the step in flight (`command-dispatch.ts`).
   */
  readonly urgent: boolean;
  /** A command the host answers itself (`rewind`, for an app with snapshots), not a method of the app. */
  readonly builtin?: 'rewind';
}

/** Roles that may send a command whose declaration names none. */
export const DEFAULT_COMMAND_ROLES: readonly string[] = Object.freeze(['controller']);

/** A command's `roles` option, checked: a non-empty list of snake_case role names (undefined: the default). */
function checkRoles(roles: unknown, appName: string, member: string): readonly string[] | undefined {
  if (roles === undefined) return undefined;
  if (!Array.isArray(roles) || roles.length === 0 || roles.some((r) => typeof r !== 'string' || !/^[a-z][a-z0-9_]{0,31}$/.test(r))) {
    throw new AppDefinitionError(
      RuntimeErrorCode.InvalidRoles,
      appName,
      member,
      `roles must be a non-empty list of snake_case role names such as ['controller', 'spectator'], got ${JSON.stringify(roles)}`,
    );
  }
  return Object.freeze([...new Set(roles as string[])]);
}

/** The commands of an app: generated setters, then events (an event replaces the setter of its name). */
export function compileCommands(appClass: AnyClass, appName: string, state: FieldSet<InputState>): Map<string, CommandSpec> {
  const commands = new Map<string, CommandSpec>();
  for (const f of state.publicFields) {
    const name = `set_${f.wire}`;
    const params = state.objectSchema([f], [f.wire]);
    const roles = checkRoles(f.options.roles, appName, f.property);
    commands.set(name, {
      name,
      kind: 'setter',
      field: f,
      urgent: f.options.urgent === true,
      roles: roles ?? DEFAULT_COMMAND_ROLES,
      schema: {
        name,
        description: f.options.description ?? `Sets ${f.wire}.`,
        kind: 'setter',
        field: f.wire,
        params,
        ...(roles && { roles: [...roles] }),
        ...(f.options.urgent === true && { urgent: true as const }),
      },
    });
  }
  const seenEvents = new Map<string, string>();
  for (const e of readEvents(appClass)) {
    const name = e.options.name ?? toSnakeCase(e.method);
    if (typeof name !== 'string' || !WIRE_NAME_PATTERN.test(name)) {
      throw new AppDefinitionError(
        RuntimeErrorCode.InvalidCommandName,
        appName,
        e.method,
        `command name ${JSON.stringify(name)} must be snake_case ([a-z][a-z0-9_]*)`,
      );
    }
    const other = seenEvents.get(name);
    if (other !== undefined) {
      throw new AppDefinitionError(
        RuntimeErrorCode.DuplicateCommand,
        appName,
        e.method,
        `declares command "${name}", already declared by ${other}; give one a different name`,
      );
    }
    seenEvents.set(name, e.method);
    let params: FieldSet | undefined;
    if (e.options.params !== undefined) {
      try {
        params = FieldSet.compile(e.options.params);
      } catch (err) {
        if (err instanceof AppDefinitionError) throw err;
        throw new AppDefinitionError(
          RuntimeErrorCode.InvalidStateField,
          e.options.params.name,
          undefined,
          `cannot be used as params of ${appName}.${e.method}: ${(err as Error).message}`,
        );
      }
    }
    const paramsSchema: JsonSchema = params ? params.objectSchema() : { type: 'object', properties: {}, additionalProperties: false };
    const roles = checkRoles(e.options.roles, appName, e.method);
    commands.set(name, {
      name,
      kind: 'event',
      method: e.method,
      params,
      urgent: e.options.urgent === true,
      roles: roles ?? DEFAULT_COMMAND_ROLES,
      schema: {
        name,
        description: e.options.description ?? '',
        kind: 'event',
        params: paramsSchema,
        ...(roles && { roles: [...roles] }),
        ...(e.options.urgent === true && { urgent: true as const }),
      },
    });
  }
  return commands;
}
