/**
 * Types of an app as a client sees it: its commands and their parameters, its messages and
 * their data, its public state and its tracks, all by wire name. `reactor types` writes them
 * from the app's schema; hand them to {@link connect} (`connect<MyAppTypes>(url)`) and the
 * client's `command()` and `onMessage()` check names and parameters at compile time.
 */
export interface AppTypes {
  /** Command name -> its `params` object (`Record<string, never>` for none). */
  commands: Record<string, Record<string, unknown> | undefined>;
  /** Message name -> its data. */
  messages: Record<string, unknown>;
  /** The public state (field wire names). */
  state: Record<string, unknown>;
  /** Track names (a union of string literals). */
  tracks: string;
}

/** What a client knows without types: any name, any parameters. */
export interface UntypedApp extends AppTypes {
  commands: Record<string, Record<string, unknown> | undefined>;
  messages: Record<string, unknown>;
  state: Record<string, unknown>;
  tracks: string;
}

/** A command name of `T`. */
export type CommandName<T extends AppTypes> = keyof T['commands'] & string;
/** A message name of `T`. */
export type MessageName<T extends AppTypes> = keyof T['messages'] & string;
/** The `params` of command `K` of `T`. */
export type CommandParams<T extends AppTypes, K extends CommandName<T>> = T['commands'][K];
/** The data of message `K` of `T`. */
export type MessageData<T extends AppTypes, K extends MessageName<T>> = T['messages'][K];
/** `command()`'s arguments after the name: the params are optional when every one of them is. */
export type CommandArgs<P, O> = Record<string, never> extends NonNullable<P> ? [params?: P, options?: O] : [params: P, options?: O];
