/**
 * `reactor types --python`: the worker's side of an app, as Python `TypedDict`s. A Python worker
 * gets the app's input (what `processInput()` returns, the second type argument of
 * `ReactorApp<State, Input, Result>`) as a dict, and returns the result as one; the keys were
 * kept in sync with the TypeScript interfaces by hand. The input and result types are read from
 * the app's compiled declarations (`dist/*.d.ts`) with the TypeScript compiler API, the state from
 * the app's schema. Types are written as they arrive in Python (`_codec.py`): typed arrays as
 * 1-D NumPy arrays of their dtype, numbers as `float` (an `int` passes where a `float` is
 * annotated), `null` as `None`.
 */
import { dirname } from 'node:path';
import type * as TS from 'typescript';
import { loadTypeScript } from './source-types.js';

/** The parts of a JSON Schema this module reads. */
interface JsonSchema {
  type?: string | string[];
  enum?: unknown[];
  const?: unknown;
  items?: JsonSchema;
  properties?: Record<string, JsonSchema>;
  required?: string[];
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  description?: string;
  'x-reactor-upload'?: unknown;
}

const DTYPES: Record<string, string> = {
  Uint8Array: 'np.uint8',
  Uint8ClampedArray: 'np.uint8',
  Int8Array: 'np.int8',
  Uint16Array: 'np.uint16',
  Int16Array: 'np.int16',
  Uint32Array: 'np.uint32',
  Int32Array: 'np.int32',
  Float32Array: 'np.float32',
  Float64Array: 'np.float64',
  BigInt64Array: 'np.int64',
  BigUint64Array: 'np.uint64',
  Buffer: 'np.uint8',
};

const PY_IDENT = /^[A-Za-z_][A-Za-z0-9_]*$/;
const PY_KEYWORDS = new Set([
  'False',
  'None',
  'True',
  'and',
  'as',
  'assert',
  'async',
  'await',
  'break',
  'class',
  'continue',
  'def',
  'del',
  'elif',
  'else',
  'except',
  'finally',
  'for',
  'from',
  'global',
  'if',
  'import',
  'in',
  'is',
  'lambda',
  'nonlocal',
  'not',
  'or',
  'pass',
  'raise',
  'return',
  'try',
  'while',
  'with',
  'yield',
]);

/** A field of a TypedDict: its key, Python type, whether it may be missing, and its docstring. */
interface Field {
  key: string;
  type: string;
  optional: boolean;
  doc?: string;
}

/**
 * A doc comment as a Python docstring's text: backslashes and triple quotes escaped, and a quote
 * at the end too (`"""Say "hi""""` does not parse).
 */
const docstring = (doc: string): string => `"""${doc.replace(/\\/g, '\\\\').replace(/"""/g, '\\"\\"\\"').replace(/"$/, '\\"')}"""`;

/** A doc comment as Python comment lines (before a functional-form TypedDict). */
const comment = (doc: string): string =>
  doc
    .split('\n')
    .map((l) => `# ${l}`.trimEnd() + '\n')
    .join('');

/** The classes of the module, in the order they must be defined (nested ones first). */
class Module {
  readonly classes: string[] = [];
  readonly names = new Set<string>();

  /** A class name not taken yet (`Name`, `Name2`, ...). */
  unique(name: string): string {
    const base = PY_IDENT.test(name) ? name : 'Dict';
    let n = base;
    for (let i = 2; this.names.has(n); i++) n = `${base}${i}`;
    this.names.add(n);
    return n;
  }

  /** Adds a TypedDict (the functional form when a key is not an identifier). */
  add(name: string, fields: Field[], doc?: string): void {
    const plain = fields.every((f) => PY_IDENT.test(f.key) && !PY_KEYWORDS.has(f.key));
    const type = (f: Field): string => (f.optional ? `NotRequired[${f.type}]` : f.type);
    if (!plain) {
      const entries = fields.map((f) => `${JSON.stringify(f.key)}: ${type(f)}`).join(', ');
      this.classes.push(`${doc ? comment(doc) : ''}${name} = TypedDict(${JSON.stringify(name)}, {${entries}})\n`);
      return;
    }
    const body = fields.map((f) => `    ${f.key}: ${type(f)}\n${f.doc ? `    ${docstring(f.doc)}\n` : ''}`).join('');
    this.classes.push(`class ${name}(TypedDict):\n${doc ? `    ${docstring(doc)}\n\n` : ''}${body || '    pass\n'}`);
  }
}

const pascal = (s: string): string =>
  s
    .split(/[^A-Za-z0-9]+/)
    .filter(Boolean)
    .map((w) => w[0]!.toUpperCase() + w.slice(1))
    .join('');

/** A JSON Schema (the app's state) as a Python type. */
function schemaType(mod: Module, s: JsonSchema | undefined, name: string): string {
  if (!s || typeof s !== 'object') return 'Any';
  if (s['x-reactor-upload'] !== undefined) return 'Any';
  if (s.const !== undefined) return `Literal[${JSON.stringify(s.const)}]`;
  if (Array.isArray(s.enum) && s.enum.length > 0) return `Literal[${s.enum.map((v) => (v === null ? 'None' : JSON.stringify(v))).join(', ')}]`;
  const union = s.anyOf ?? s.oneOf;
  if (union) return unionOf(union.map((u, i) => schemaType(mod, u, `${name}${i + 1}`)));
  const types = Array.isArray(s.type) ? s.type : s.type !== undefined ? [s.type] : [];
  if (types.length > 1) return unionOf(types.map((t) => schemaType(mod, { ...s, type: t }, name)));
  switch (types[0]) {
    case 'string':
      return 'str';
    case 'integer':
      return 'int';
    case 'number':
      return 'float';
    case 'boolean':
      return 'bool';
    case 'null':
      return 'None';
    case 'array':
      return `List[${schemaType(mod, s.items, `${name}Item`)}]`;
    case 'object':
      return s.properties ? schemaDict(mod, s, name) : 'Dict[str, Any]';
    default:
      return s.properties ? schemaDict(mod, s, name) : 'Any';
  }
}

function schemaDict(mod: Module, s: JsonSchema, name: string, allRequired = false, doc?: string): string {
  const required = new Set(s.required ?? []);
  const cls = mod.unique(name);
  const fields = Object.entries(s.properties ?? {}).map(([key, v]) => ({
    key,
    type: schemaType(mod, v, `${cls}${pascal(key)}`),
    optional: !allRequired && !required.has(key),
    ...(v.description !== undefined && { doc: v.description }),
  }));
  mod.add(cls, fields, doc);
  return cls;
}

function unionOf(parts: string[]): string {
  const unique = [...new Set(parts)];
  const some = unique.filter((p) => p !== 'None');
  const inner = some.length === 1 ? some[0]! : `Union[${some.join(', ')}]`;
  return unique.includes('None') ? `Optional[${inner}]` : inner;
}

/** A TypeScript type (as JSON and the codec carry it) as a Python type. */
function tsType(ts: typeof TS, checker: TS.TypeChecker, mod: Module, t: TS.Type, name: string, depth: number): string {
  if (depth > 8) return 'Any';
  const f = t.flags;
  if (f & (ts.TypeFlags.Any | ts.TypeFlags.Unknown)) return 'Any';
  if (f & ts.TypeFlags.StringLiteral) return `Literal[${JSON.stringify((t as TS.StringLiteralType).value)}]`;
  if (f & ts.TypeFlags.NumberLiteral) return `Literal[${(t as TS.NumberLiteralType).value}]`;
  if (f & ts.TypeFlags.BooleanLiteral) return checker.typeToString(t) === 'true' ? 'Literal[True]' : 'Literal[False]';
  if (f & (ts.TypeFlags.String | ts.TypeFlags.TemplateLiteral)) return 'str';
  if (f & ts.TypeFlags.Number) return 'float';
  if (f & ts.TypeFlags.BigInt) return 'int';
  if (f & ts.TypeFlags.Boolean) return 'bool';
  if (f & (ts.TypeFlags.Null | ts.TypeFlags.Undefined | ts.TypeFlags.Void)) return 'None';
  if (t.isUnion()) {
    const parts = t.types.map((u) => tsType(ts, checker, mod, u, name, depth + 1));
    // `boolean` is `true | false` to the checker; literals of one kind read as one Literal.
    let joined =
      parts.includes('Literal[True]') && parts.includes('Literal[False]')
        ? ['bool', ...parts.filter((p) => p !== 'Literal[True]' && p !== 'Literal[False]')]
        : parts;
    const literals = joined.filter((p) => p.startsWith('Literal['));
    if (literals.length > 1) joined = [`Literal[${literals.map((l) => l.slice(8, -1)).join(', ')}]`, ...joined.filter((p) => !p.startsWith('Literal['))];
    return unionOf(joined);
  }
  if (checker.isTupleType(t))
    return `Tuple[${
      checker
        .getTypeArguments(t as TS.TypeReference)
        .map((a, i) => tsType(ts, checker, mod, a, `${name}${i + 1}`, depth + 1))
        .join(', ') || '()'
    }]`;
  if (checker.isArrayType(t)) {
    const [item] = checker.getTypeArguments(t as TS.TypeReference);
    return `List[${item ? tsType(ts, checker, mod, item, `${name}Item`, depth + 1) : 'Any'}]`;
  }
  if (f & ts.TypeFlags.Object) {
    const symbolName = t.getSymbol()?.getName();
    if (symbolName !== undefined && DTYPES[symbolName] !== undefined) return `npt.NDArray[${DTYPES[symbolName]}]`;
    if (symbolName === 'Date') return 'str';
    const props = checker.getPropertiesOfType(t).filter((p) => {
      const d = p.valueDeclaration ?? p.declarations?.[0];
      return (
        d !== undefined &&
        !ts.isMethodDeclaration(d) &&
        !ts.isMethodSignature(d) &&
        !(ts.getCombinedModifierFlags(d as TS.Declaration) & ts.ModifierFlags.Private)
      );
    });
    const index = checker.getIndexInfoOfType(t, ts.IndexKind.String);
    if (props.length === 0) return `Dict[str, ${index ? tsType(ts, checker, mod, index.type, `${name}Value`, depth + 1) : 'Any'}]`;
    const own = symbolName !== undefined && symbolName !== '__type' && symbolName !== '__object' && PY_IDENT.test(symbolName) ? symbolName : name;
    const cls = mod.unique(own);
    const fields = props.map((p) => {
      const d = (p.valueDeclaration ?? p.declarations![0])!;
      const optional = (p.flags & ts.SymbolFlags.Optional) !== 0;
      let type = tsType(ts, checker, mod, checker.getTypeOfSymbolAtLocation(p, d), `${cls}${pascal(p.name)}`, depth + 1);
      // An optional field is a missing key, not a None.
      if (optional) type = type.replace(/^Optional\[(.*)\]$/, '$1');
      const doc = ts.displayPartsToString(p.getDocumentationComment(checker)).trim();
      return { key: p.name, type, optional, ...(doc !== '' && { doc }) };
    });
    const doc = ts.displayPartsToString(t.getSymbol()?.getDocumentationComment(checker) ?? []).trim();
    mod.add(cls, fields, doc || undefined);
    return cls;
  }
  return 'Any';
}

/** The input and result types of the app class `className` in `dts`, if it extends `ReactorApp<State, Input, Result>`. */
function workerTypes(dts: string, className: string, mod: Module): { input?: string; result?: string } | undefined {
  const ts = loadTypeScript(dirname(dts));
  if (!ts) return undefined;
  const program = ts.createProgram([dts], {
    noEmit: true,
    skipLibCheck: true,
    types: [],
    strict: true,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
  });
  const checker = program.getTypeChecker();
  let found: { input?: string; result?: string } | undefined;
  const visit = (node: TS.Node): void => {
    if (found) return;
    if (ts.isClassDeclaration(node) && node.name?.text === className) {
      const symbol = checker.getSymbolAtLocation(node.name);
      const base = symbol && checker.getBaseTypes(checker.getDeclaredTypeOfSymbol(symbol) as TS.InterfaceType)[0];
      const args = base ? checker.getTypeArguments(base as TS.TypeReference) : [];
      found = {};
      if (args[1]) found.input = tsType(ts, checker, mod, args[1], `${className.replace(/App$/, '')}Input`, 0);
      if (args[2]) found.result = tsType(ts, checker, mod, args[2], `${className.replace(/App$/, '')}Result`, 0);
      return;
    }
    ts.forEachChild(node, visit);
  };
  for (const file of program.getSourceFiles()) if (!file.fileName.includes('/node_modules/')) visit(file);
  return found;
}

/** What `reactor types --python` learned, for its warnings. */
export interface PythonTypes {
  text: string;
  /** Why the input and result types are missing, if they are. */
  missing?: string;
}

/**
 * The Python module `reactor types --python` prints.
 * @param dts the app module's declarations (undefined when the build wrote none)
 */
export function pythonTypes(schema: { app: { name: string; version: string }; state: unknown }, appClassName: string, dts: string | undefined): PythonTypes {
  const mod = new Module();
  const prefix = pascal(appClassName.replace(/App$/, '')) || 'App';
  const state = schemaDict(
    mod,
    schema.state as JsonSchema,
    `${prefix}State`,
    true,
    "The session state (the app's schema): what processInput() usually passes on from it.",
  );
  let worker: { input?: string; result?: string } | undefined;
  let missing: string | undefined;
  if (dts === undefined) missing = `no declarations next to the app's module (build with "declaration": true)`;
  else {
    worker = workerTypes(dts, appClassName, mod);
    if (!worker) missing = 'typescript is not installed for this app';
    else if (worker.input === undefined) missing = `${appClassName} does not extend ReactorApp<State, Input, Result> in its declarations`;
  }
  const body = mod.classes.join('\n\n');
  const uses = (word: string): boolean => new RegExp(`\\b${word}\\[`).test(body);
  const typing = ['Any', 'Dict', 'List', 'Literal', 'Optional', 'Tuple', 'Union'].filter((w) => (w === 'Any' ? /\bAny\b/.test(body) : uses(w)));
  const aliases = [
    `State = ${state}`,
    ...(worker?.input !== undefined ? [`Input = ${worker.input}`, '"""What generate(self, input) gets: processInput()\'s value."""'] : []),
    ...(worker?.result !== undefined ? [`Result = ${worker.result}`, '"""What generate() returns (rank 0\'s is the result)."""'] : []),
  ];
  const text = [
    `"""The worker types of ${schema.app.name} ${schema.app.version}, written by \`reactor types --python\`.`,
    '',
    'Do not edit: run `reactor types --python` again after the app changes.',
    `Use: from app_types import Input, Result  (def generate(self, input: Input) -> Result)`,
    '"""',
    `from typing import ${[...typing, 'TypedDict'].join(', ')}`,
    ...(uses('npt\\.NDArray') ? ['', 'import numpy as np', 'import numpy.typing as npt'] : []),
    ...(uses('NotRequired')
      ? ['', 'try:', '    from typing import NotRequired', 'except ImportError:  # Python < 3.11', '    from typing_extensions import NotRequired']
      : []),
    '',
    '',
    body,
    '',
    ...aliases,
    '',
  ].join('\n');
  return missing === undefined ? { text } : { text, missing };
}
