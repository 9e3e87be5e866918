/**
 * `reactor types`: the app's client types (an `AppTypes` for `connect<T>()` of `@reactor/client`),
 * written as TypeScript from its schema: the manifest's app, or a running server's `GET /schema`.
 */
import type { Logger } from '@reactor/log';
import { AppHost, ReactorError } from '@reactor/runtime';
import { describeApp, toSnakeCase } from '@reactor/runtime/internal';
import { findManifest, loadManifest, ManifestError, MANIFEST_FILE } from './manifest.js';
import { importApp } from './commands.js';
import { CliErrorCode } from './errors.js';
import { declarationsOf, messageFieldTypes } from './source-types.js';
import { pythonTypes } from './python-types.js';

/** The parts of a JSON Schema that `reactor types` turns into TypeScript. */
interface JsonSchema {
  type?: string | string[];
  enum?: unknown[];
  const?: unknown;
  items?: JsonSchema;
  properties?: Record<string, JsonSchema>;
  required?: string[];
  additionalProperties?: boolean | JsonSchema;
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  description?: string;
  /** An upload field (the schema carries the reference a command sends). */
  'x-reactor-upload'?: unknown;
  /** `reactor types`' own: the TypeScript type to write, read from the app's declarations. */
  'x-ts-type'?: string;
}

/** The parts of an app schema `reactor types` reads. */
export interface TypesSchema {
  app: { name: string; version: string };
  protocol: number;
  state: JsonSchema;
  commands: Array<{ name: string; description?: string; params: JsonSchema }>;
  messages: Array<{ name: string; description?: string; schema?: JsonSchema }>;
  tracks: Array<{ name: string }>;
}

const IDENT = /^[A-Za-z_$][\w$]*$/;
const key = (k: string): string => (IDENT.test(k) ? k : JSON.stringify(k));
const comment = (text: string | undefined, pad: string): string => (text ? `${pad}/** ${text.replace(/\*\//g, '*\\/').replace(/\s+/g, ' ')} */\n` : '');

/** A JSON Schema as a TypeScript type (`unknown` for what it does not say). */
function tsType(s: JsonSchema | undefined, pad: string, allRequired = false): string {
  if (!s || typeof s !== 'object') return 'unknown';
  if (typeof s['x-ts-type'] === 'string') return s['x-ts-type'];
  if (s.const !== undefined) return JSON.stringify(s.const);
  if (Array.isArray(s.enum) && s.enum.length > 0) return s.enum.map((v) => JSON.stringify(v)).join(' | ');
  const union = s.anyOf ?? s.oneOf;
  if (union) return union.map((u) => tsType(u, pad)).join(' | ') || 'unknown';
  const types = Array.isArray(s.type) ? s.type : s.type !== undefined ? [s.type] : [];
  if (types.length > 1) return types.map((t) => tsType({ ...s, type: t }, pad)).join(' | ');
  switch (types[0]) {
    case 'string':
      return 'string';
    case 'number':
    case 'integer':
      return 'number';
    case 'boolean':
      return 'boolean';
    case 'null':
      return 'null';
    case 'array':
      return `Array<${tsType(s.items, pad)}>`;
    case 'object':
      return objectType(s, pad, allRequired);
    default:
      return s.properties ? objectType(s, pad, allRequired) : 'unknown';
  }
}

function objectType(s: JsonSchema, pad: string, allRequired: boolean): string {
  const props = Object.entries(s.properties ?? {});
  if (props.length === 0)
    return s.additionalProperties === false || s.additionalProperties === undefined
      ? 'Record<string, never>'
      : `Record<string, ${tsType(s.additionalProperties as JsonSchema, pad)}>`;
  const required = new Set(s.required ?? []);
  const inner = `${pad}  `;
  const lines = props.map(([k, v]) => `${comment(v.description, inner)}${inner}${key(k)}${allRequired || required.has(k) ? '' : '?'}: ${tsType(v, inner)};\n`);
  return `{\n${lines.join('')}${pad}}`;
}

/** `reactor-video` -> `ReactorVideoTypes`. */
export function typesName(appName: string): string {
  const words = appName.split(/[^A-Za-z0-9]+/).filter(Boolean);
  const name = words.map((w) => w[0]!.toUpperCase() + w.slice(1)).join('') || 'App';
  return `${/^[0-9]/.test(name) ? `App${name}` : name}Types`;
}

/**
 * An upload field as the state holds it: `null` until a client sets it, then what the server
 * knows of the file (`UploadInfo` of @reactor/client), not the `{ uploadId }` a command sends.
 */
const UPLOAD_STATE_TYPE = '{ uploadId: string; name: string; mimeType: string; size: number } | null';

function stateSchema(state: JsonSchema): JsonSchema {
  const props = state.properties;
  if (!props) return state;
  return {
    ...state,
    properties: Object.fromEntries(
      Object.entries(props).map(([k, v]) => [k, v['x-reactor-upload'] !== undefined ? { ...v, 'x-ts-type': UPLOAD_STATE_TYPE } : v]),
    ),
  };
}

/**
 * Field types read from the app's declarations (see source-types.ts), by message wire name and
 * field wire name; they replace what the schema leaves open.
 */
export type MessageTypeOverrides = ReadonlyMap<string, ReadonlyMap<string, string>>;

function withOverrides(m: TypesSchema['messages'][number], overrides: MessageTypeOverrides | undefined): JsonSchema | undefined {
  const fields = overrides?.get(m.name);
  if (!fields || !m.schema?.properties) return m.schema;
  const props = Object.fromEntries(
    Object.entries(m.schema.properties).map(([k, v]) => {
      const ts = fields.get(k);
      // A field the schema types from its constraints keeps that type; an open one (`{}`) takes the declared one.
      return [k, ts !== undefined && Object.keys(v).filter((x) => x !== 'description').length === 0 ? { ...v, 'x-ts-type': ts } : v];
    }),
  );
  return { ...m.schema, properties: props };
}

/** The TypeScript module `reactor types` prints: one exported `AppTypes`. */
export function schemaToTypes(schema: TypesSchema, typeName = typesName(schema.app.name), overrides?: MessageTypeOverrides): string {
  if (!IDENT.test(typeName)) throw new ReactorError(CliErrorCode.CliUsage, `--name must be a TypeScript identifier, got ${JSON.stringify(typeName)}`);
  const p = '    ';
  const commands = schema.commands.map((c) => `${comment(c.description, p)}${p}${key(c.name)}: ${tsType(c.params, p)};\n`).join('');
  // A message's data always carries every field of its class.
  const messages = schema.messages.map((m) => `${comment(m.description, p)}${p}${key(m.name)}: ${tsType(withOverrides(m, overrides), p, true)};\n`).join('');
  const tracks = schema.tracks.map((t) => JSON.stringify(t.name)).join(' | ') || 'never';
  return [
    `// The client types of ${schema.app.name} ${schema.app.version} (protocol ${schema.protocol}), written by \`reactor types\`.`,
    '// Do not edit: run `reactor types` again after the app changes.',
    `// Use: const client = await connect<${typeName}>(url, { WebSocket });`,
    `export type ${typeName} = {`,
    commands ? `  commands: {\n${commands}  };` : '  commands: Record<never, never>;',
    messages ? `  messages: {\n${messages}  };` : '  messages: Record<never, never>;',
    `  state: ${tsType(stateSchema(schema.state), '  ', true)};`,
    `  tracks: ${tracks};`,
    '};',
    '',
  ].join('\n');
}

/** The flags of `reactor types`. */
export interface TypesOptions {
  manifest?: string;
  url?: string;
  token?: string;
  name?: string;
  /** Python `TypedDict`s of the worker's input, result and the state, instead of the client types. */
  python?: boolean;
}

async function fetchSchema(url: string, token: string | undefined): Promise<TypesSchema> {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new ReactorError(CliErrorCode.CliUsage, `--url must be the server's http(s):// URL, got ${JSON.stringify(url)}`);
  }
  u.pathname = `${u.pathname.replace(/\/$/, '')}/schema`;
  if (token !== undefined) u.searchParams.set('token', token);
  let res: Response;
  try {
    res = await fetch(u);
  } catch (err) {
    throw new ReactorError(
      CliErrorCode.SchemaUnavailable,
      `cannot reach ${u.origin}: ${(err as Error).message}; is the app running (reactor run) at that address?`,
      { cause: err },
    );
  }
  if (!res.ok)
    throw new ReactorError(
      CliErrorCode.SchemaUnavailable,
      `GET ${u.origin}${u.pathname} answered ${res.status}${res.status === 401 ? ': pass --token <token>' : ''}`,
    );
  return (await res.json()) as TypesSchema;
}

/** `reactor types [--url <server>] [--name TypeName]`: prints the app's `AppTypes` to stdout. */
export async function typesCommand(o: TypesOptions, logger: Logger): Promise<void> {
  let schema: TypesSchema;
  let overrides: MessageTypeOverrides | undefined;
  if (o.python) {
    if (o.url !== undefined)
      throw new ReactorError(CliErrorCode.CliUsage, "--python reads the app's declarations, not a server: run it in the app's folder, without --url");
    const file = o.manifest ?? findManifest();
    if (!file) throw new ManifestError(`no ${MANIFEST_FILE} in ${process.cwd()} or its parents; run reactor from your app's folder or pass --manifest <file>`);
    const m = loadManifest(file);
    const App = await importApp(m, { logger });
    const host = new AppHost(App, { logger });
    const appSchema = host.schema;
    await host.close();
    const py = pythonTypes(appSchema, App.name, declarationsOf(m.runtime.module));
    if (py.missing !== undefined) logger.warn(`${py.missing}: only the state is written, not the worker's Input and Result`);
    process.stdout.write(py.text);
    return;
  }
  if (o.url !== undefined) schema = await fetchSchema(String(o.url), o.token ?? process.env['REACTOR_TOKEN']);
  else {
    const file = o.manifest ?? findManifest();
    if (!file)
      throw new ManifestError(
        `no ${MANIFEST_FILE} in ${process.cwd()} or its parents; run reactor from your app's folder, pass --manifest <file>, or --url <server>`,
      );
    const m = loadManifest(file);
    const App = await importApp(m, { logger });
    const host = new AppHost(App, { logger });
    schema = host.schema as TypesSchema;
    await host.close();
    overrides = declaredMessageTypes(m.runtime.module, App, logger);
  }
  process.stdout.write(schemaToTypes(schema, o.name, overrides));
}

/** The name an `app-types.ts` exports its types under (`export type X = {`), to keep it when the file is written again. */
export function typesNameIn(text: string): string | undefined {
  return /^export type ([A-Za-z_$][\w$]*) = \{/m.exec(text)?.[1];
}

/**
 * What `reactor types` would print for a loaded app (`reactor dev` writes it to `src/app-types.ts`
 * after a reload): the schema's types with the field types of the module's declarations.
 */
export function appTypesOf(module: string, App: Parameters<typeof describeApp>[0], schema: unknown, logger: Logger, typeName?: string): string {
  return schemaToTypes(schema as TypesSchema, typeName, declaredMessageTypes(module, App, logger));
}

/** The message field types the app's `.d.ts` declares, by wire names; undefined (with a warning) when they cannot be read. */
function declaredMessageTypes(module: string, App: Parameters<typeof describeApp>[0], logger: Logger): MessageTypeOverrides | undefined {
  const classes = [...describeApp(App).messages.keys()];
  if (classes.length === 0) return undefined;
  const dts = declarationsOf(module);
  if (!dts) {
    logger.warn(`no declarations next to ${module} (build with "declaration": true): message fields without validators are typed unknown`);
    return undefined;
  }
  const found = messageFieldTypes(
    dts,
    classes.map((c) => c.name),
  );
  if (!found) {
    logger.warn('typescript is not installed for this app: message fields without validators are typed unknown');
    return undefined;
  }
  return new Map(
    classes.filter((c) => found.has(c.name)).map((c) => [toSnakeCase(c.name), new Map([...found.get(c.name)!].map(([field, ts]) => [toSnakeCase(field), ts]))]),
  );
}
