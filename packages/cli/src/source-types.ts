/**
 * The TypeScript types of an app's message classes, read from its compiled declarations
 * (`dist/*.d.ts`, next to the module `runtime.import` names) with the TypeScript compiler API.
 * The schema knows a field's type only from its class-validator constraints; a message such as
 * `class RunnerInfo { constructor(readonly worldSize: number) {} }` carries none, and would be
 * typed `unknown`. Types are written out structurally (an interface the generated file cannot
 * import becomes its object type), as the fields travel: JSON, under snake_case names at the top.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type * as TS from 'typescript';

/** Per message class name: its field names (as declared) and their TypeScript types. */
export type MessageFieldTypes = Map<string, Map<string, string>>;

/** The `typescript` the app uses (else this CLI's), or undefined when neither has one. */
export function loadTypeScript(from: string): typeof TS | undefined {
  for (const base of [join(from, 'package.json'), import.meta.url]) {
    try {
      return createRequire(base)('typescript') as typeof TS;
    } catch {
      // not installed there
    }
  }
  return undefined;
}

/** The declaration file of a compiled module (`dist/index.js` -> `dist/index.d.ts`), if it exists. */
export function declarationsOf(module: string): string | undefined {
  const dts = module.replace(/\.(c|m)?js$/, '.d.$1ts');
  return dts !== module && existsSync(dts) ? dts : undefined;
}

/**
 * Reads the field types of the named classes from `dts` and what it imports.
 * @returns undefined when TypeScript cannot be loaded (the caller keeps the schema's types)
 */
export function messageFieldTypes(dts: string, classNames: readonly string[]): MessageFieldTypes | undefined {
  const ts = loadTypeScript(dirname(dts));
  if (!ts) return undefined;
  // NodeNext: the app's imports resolve as Node resolves them, through each package's `exports` (a type
  // from a package with an exports map only, such as @reactor/tfjs-backend, is otherwise `unknown`).
  const program = ts.createProgram([dts], {
    noEmit: true,
    skipLibCheck: true,
    types: [],
    strict: true,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
  });
  const checker = program.getTypeChecker();
  const wanted = new Set(classNames);
  const found: MessageFieldTypes = new Map();
  const visit = (node: TS.Node): void => {
    if (ts.isClassDeclaration(node) && node.name && wanted.has(node.name.text) && !found.has(node.name.text)) {
      const symbol = checker.getSymbolAtLocation(node.name);
      if (symbol) found.set(node.name.text, classFields(ts, checker, checker.getDeclaredTypeOfSymbol(symbol)));
    }
    ts.forEachChild(node, visit);
  };
  for (const file of program.getSourceFiles()) if (!file.fileName.includes('/node_modules/')) visit(file);
  return found;
}

/** The public data fields of a class instance type (methods, private and protected members left out). */
function classFields(ts: typeof TS, checker: TS.TypeChecker, type: TS.Type): Map<string, string> {
  const out = new Map<string, string>();
  for (const p of type.getProperties()) {
    const decl = p.valueDeclaration ?? p.declarations?.[0];
    if (!decl || ts.isMethodDeclaration(decl) || ts.isGetAccessorDeclaration(decl) || ts.isSetAccessorDeclaration(decl)) continue;
    const flags = ts.getCombinedModifierFlags(decl as TS.Declaration);
    if (flags & (ts.ModifierFlags.Private | ts.ModifierFlags.Protected) || p.name.startsWith('#')) continue;
    const t = checker.getTypeOfSymbolAtLocation(p, decl);
    out.set(p.name, typeText(ts, checker, t, '      ', 0));
  }
  return out;
}

/** A type as the JSON the field becomes, written out (no names the generated file would need to import). */
function typeText(ts: typeof TS, checker: TS.TypeChecker, t: TS.Type, pad: string, depth: number): string {
  if (depth > 6) return 'unknown';
  const f = t.flags;
  if (f & ts.TypeFlags.Any || f & ts.TypeFlags.Unknown) return 'unknown';
  if (f & ts.TypeFlags.StringLiteral) return JSON.stringify((t as TS.StringLiteralType).value);
  if (f & ts.TypeFlags.NumberLiteral) return String((t as TS.NumberLiteralType).value);
  if (f & ts.TypeFlags.BooleanLiteral) return checker.typeToString(t);
  if (f & (ts.TypeFlags.String | ts.TypeFlags.TemplateLiteral)) return 'string';
  if (f & ts.TypeFlags.Number) return 'number';
  if (f & ts.TypeFlags.Boolean) return 'boolean';
  if (f & ts.TypeFlags.Null) return 'null';
  if (f & (ts.TypeFlags.Undefined | ts.TypeFlags.Void)) return 'undefined';
  if (t.isUnion()) {
    // `boolean` is `true | false` to the checker: keep it one word.
    const parts = [...new Set(t.types.map((u) => typeText(ts, checker, u, pad, depth + 1)))];
    const joined = parts.includes('true') && parts.includes('false') ? ['boolean', ...parts.filter((p) => p !== 'true' && p !== 'false')] : parts;
    // null (and undefined) last, as people write them: `string | null`.
    return [...joined.filter((p) => p !== 'null' && p !== 'undefined'), ...joined.filter((p) => p === 'null' || p === 'undefined')].join(' | ');
  }
  if (checker.isTupleType(t))
    return `[${checker
      .getTypeArguments(t as TS.TypeReference)
      .map((a) => typeText(ts, checker, a, pad, depth + 1))
      .join(', ')}]`;
  if (checker.isArrayType(t)) {
    const [item] = checker.getTypeArguments(t as TS.TypeReference);
    return `Array<${item ? typeText(ts, checker, item, pad, depth + 1) : 'unknown'}>`;
  }
  if (f & ts.TypeFlags.Object) {
    const name = t.getSymbol()?.getName();
    // What JSON.stringify makes of them.
    if (name === 'Date') return 'string';
    if (name !== undefined && /^(?:Uint8|Uint8Clamped|Int8|Uint16|Int16|Uint32|Int32|Float32|Float64)Array$/.test(name)) return 'Record<string, number>';
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
    if (props.length === 0) return index ? `Record<string, ${typeText(ts, checker, index.type, pad, depth + 1)}>` : 'Record<string, never>';
    const inner = `${pad}  `;
    const lines = props.map((p) => {
      const d = (p.valueDeclaration ?? p.declarations![0])!;
      const optional = (p.flags & ts.SymbolFlags.Optional) !== 0;
      const text = typeText(ts, checker, checker.getTypeOfSymbolAtLocation(p, d), inner, depth + 1);
      const key = /^[A-Za-z_$][\w$]*$/.test(p.name) ? p.name : JSON.stringify(p.name);
      return `${inner}${key}${optional ? '?' : ''}: ${optional ? text.replace(/ \| undefined$/, '') : text};\n`;
    });
    return `{\n${lines.join('')}${pad}}`;
  }
  return 'unknown';
}
