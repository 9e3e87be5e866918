/**
 * `reactor init <dir>`: writes a ready project (app class, worker, manifest, config, tests,
 * README) from a template. Everything is written into a staging folder next to the target and
 * renamed into place at the end, so a failure leaves nothing half-written.
 */
import { execFile } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { parse as parseYaml } from 'yaml';
import { ReactorError } from '@reactor/runtime';
import { CliErrorCode } from './errors.js';
import { typesName } from './types-command.js';
import { MANIFEST_SCHEMA_FILE } from './manifest-schema.js';

/** The templates `reactor init --template` knows. */
export const INIT_TEMPLATES = ['minimal', 'video', 'camera', 'python'] as const;
export type InitTemplate = (typeof INIT_TEMPLATES)[number];

/** The framework packages a generated project depends on (none of them is on the npm registry). */
export const FRAMEWORK_PACKAGES = ['log', 'protocol', 'access', 'client', 'viewer', 'runtime', 'distributed', 'server', 'agones', 'router', 'cli'] as const;
/**
 * The framework packages a new project depends on itself; the others come in through theirs:
 * `router` (for `reactor route`) through the CLI, `viewer` (the browser viewer's files) through
 * the server, `protocol` through the runtime and the client, `access` (tokens, access checks)
 * through the server, the router and the CLI.
 */
const APP_PACKAGES = FRAMEWORK_PACKAGES.filter((p) => p !== 'router' && p !== 'viewer' && p !== 'protocol' && p !== 'access');

/** Third-party dependencies of a generated project, with the versions used outside a workspace's catalog. */
const THIRD_PARTY = {
  dependencies: { 'class-transformer': '0.5.1', 'class-validator': '0.15.1', 'reflect-metadata': '^0.2.2', yaml: '^2.9.1' },
  devDependencies: { '@types/node': '^20.19.0', '@types/ws': '^8.18.1', typescript: '~5.9.3', vite: '^8.4.0', vitest: '^4.1.0', ws: '^8.23.0' },
} as const;

/** Options of {@link initProject}. */
export interface InitOptions {
  /** Folder to create (relative to `cwd`). It may exist if it is empty. */
  dir: string;
  template?: string;
  /** GPUs the app declares in `reactor.yaml` (`model.resources.gpu.count`). */
  gpus?: number | string;
  /** npm package name (default: the folder's name). */
  name?: string;
  cwd?: string;
}

/** What {@link initProject} wrote. */
export interface InitResult {
  /** Absolute path of the new project. */
  dir: string;
  name: string;
  template: InitTemplate;
  /** `workspace`: an app under this workspace's `apps/` (workspace:* dependencies); `standalone`: a project of its own. */
  mode: 'workspace' | 'standalone';
  /** The commands to run next, from the current folder. */
  nextSteps: string[];
}

const here = dirname(fileURLToPath(import.meta.url));
/** `packages/cli/templates` (next to `src/` and `dist/`). */
const TEMPLATES_DIR = resolve(here, '../templates');
/** The folder holding the framework packages (`packages/` of the checkout this CLI runs from). */
const PACKAGES_DIR = resolve(here, '../..');

/**
 * The folder of framework package `p`: `packages/<p>` of the checkout this CLI runs from, else
 * where Node finds `@reactor/<p>` from this CLI or from `@reactor/runtime` (the CLI installed
 * from tarballs or a registry, e.g. under `create-reactor`: npm puts the packages side by side,
 * pnpm only links a package's own dependencies next to it).
 */
function frameworkDir(p: string): string | undefined {
  const name = `@reactor/${p}`;
  const isIt = (dir: string) => {
    try {
      return (JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: string }).name === name;
    } catch {
      return false;
    }
  };
  if (isIt(join(PACKAGES_DIR, p))) return join(PACKAGES_DIR, p);
  const resolveFrom = (from: string): string | undefined => {
    try {
      let dir = dirname(createRequire(from).resolve(name));
      while (!isIt(dir) && dirname(dir) !== dir) dir = dirname(dir);
      return isIt(dir) ? dir : undefined;
    } catch {
      return undefined;
    }
  };
  const found = resolveFrom(import.meta.url);
  if (found || p === 'runtime') return found;
  const runtime = frameworkDir('runtime');
  return runtime ? resolveFrom(join(runtime, 'package.json')) : undefined;
}

const CORE_MODULES = new Set([
  'node_modules',
  'favicon.ico',
  'assert',
  'buffer',
  'child_process',
  'crypto',
  'events',
  'fs',
  'http',
  'https',
  'net',
  'os',
  'path',
  'process',
  'stream',
  'url',
  'util',
  'zlib',
]);

/** Why `name` is not a valid npm package name, or undefined when it is. */
export function packageNameProblem(name: string): string | undefined {
  if (name.length === 0) return 'is empty';
  if (name.length > 214) return 'is longer than 214 characters';
  if (name !== name.toLowerCase()) return 'has upper-case letters';
  if (name.trim() !== name) return 'starts or ends with spaces';
  if (/^[._]/.test(name)) return 'starts with "." or "_"';
  if (CORE_MODULES.has(name)) return 'is a reserved name';
  if (!/^(?:@[a-z0-9-~][a-z0-9-._~]*\/)?[a-z0-9-~][a-z0-9-._~]*$/.test(name))
    return 'may only hold lower-case letters, digits, "-", ".", "_" and "~" (and one "@scope/" prefix)';
  return undefined;
}

/** `my-cool.app` -> `MyCoolApp`: the prefix of the generated class names. */
export function classPrefix(name: string): string {
  const bare = name.replace(/^@[^/]+\//, '');
  const words = bare.split(/[^a-z0-9]+/).filter(Boolean);
  const joined = words.map((w) => w[0]!.toUpperCase() + w.slice(1)).join('') || 'My';
  const prefix = /^[0-9]/.test(joined) ? `App${joined}` : joined;
  // `MyApp` would give `MyAppApp`.
  return prefix.endsWith('App') && prefix.length > 3 ? prefix.slice(0, -3) : prefix;
}

/** The workspace root whose `apps/*` holds `target`, or undefined. */
function workspaceFor(target: string): string | undefined {
  const parent = dirname(target);
  if (basename(parent) !== 'apps') return undefined;
  const root = dirname(parent);
  const file = join(root, 'pnpm-workspace.yaml');
  if (!existsSync(file)) return undefined;
  try {
    const doc = parseYaml(readFileSync(file, 'utf8')) as { packages?: unknown };
    return Array.isArray(doc?.packages) && doc.packages.includes('apps/*') ? root : undefined;
  } catch {
    return undefined;
  }
}

function fail(code: CliErrorCode, message: string, cause?: unknown): never {
  throw new ReactorError(code, message, cause === undefined ? undefined : { cause });
}

function checkInput(o: InitOptions): { target: string; name: string; template: InitTemplate; gpus: number } {
  const template = (o.template ?? 'minimal') as InitTemplate;
  if (!INIT_TEMPLATES.includes(template)) fail(CliErrorCode.InitUnknownTemplate, `unknown template "${o.template}"; pick one of: ${INIT_TEMPLATES.join(', ')}`);
  const gpus = o.gpus === undefined ? 1 : Number(o.gpus);
  if (!Number.isInteger(gpus) || gpus < 0 || gpus > 64) fail(CliErrorCode.CliUsage, `--gpus must be an integer from 0 to 64, got ${JSON.stringify(o.gpus)}`);
  if (!o.dir) fail(CliErrorCode.CliUsage, 'reactor init needs a folder: reactor init <dir>');
  const target = resolve(o.cwd ?? process.cwd(), o.dir);
  const name = o.name ?? basename(target);
  const problem = packageNameProblem(name);
  if (problem) {
    fail(
      CliErrorCode.InitInvalidName,
      `"${name}" is not a valid npm package name: it ${problem}. ${o.name === undefined ? 'Name the folder differently or pass --name <name>' : 'Pass another --name'} (for example "${
        name
          .toLowerCase()
          .replace(/[^a-z0-9-._~@/]+/g, '-')
          .replace(/^[._]+/, '') || 'my-app'
      }")`,
    );
  }
  if (existsSync(target)) {
    if (!statSync(target).isDirectory()) fail(CliErrorCode.InitTargetExists, `${target} exists and is not a folder; pick another <dir>`);
    if (readdirSync(target).length > 0)
      fail(CliErrorCode.InitTargetExists, `${target} is not empty; pick a new or empty folder (reactor init never writes over files)`);
  }
  return { target, name, template, gpus };
}

/** Replaces the template placeholders. */
function fill(text: string, vars: Record<string, string>): string {
  return text.replace(/__([A-Z_]+)__/g, (m, key: string) => vars[key] ?? m);
}

/** Copies `templates/<folder>` into `to`, dropping the `.tmpl` suffix and filling placeholders. */
function copyTemplate(folder: string, to: string, vars: Record<string, string>): void {
  const from = join(TEMPLATES_DIR, folder);
  for (const entry of readdirSync(from, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const src = join(entry.parentPath, entry.name);
    const rel = relative(from, src)
      .replace(/\.tmpl$/, '')
      .replace(/(^|\/)gitignore$/, '$1.gitignore');
    const dest = join(to, rel);
    mkdirSync(dirname(dest), { recursive: true });
    writeFileSync(dest, fill(readFileSync(src, 'utf8'), vars));
  }
}

function json(value: unknown): string {
  return `${JSON.stringify(value, null, 2)}\n`;
}

const COMPILER_OPTIONS = {
  target: 'ES2022',
  module: 'NodeNext',
  moduleResolution: 'NodeNext',
  lib: ['ES2023'],
  strict: true,
  noImplicitOverride: true,
  verbatimModuleSyntax: true,
  experimentalDecorators: true,
  emitDecoratorMetadata: true,
  useDefineForClassFields: false,
  declaration: true,
  sourceMap: true,
  skipLibCheck: true,
  types: ['node'],
};

const SCRIPTS = {
  build: 'tsc -p tsconfig.build.json',
  typecheck: 'tsc -p tsconfig.json --noEmit',
  test: 'tsc -p tsconfig.json --noEmit && tsc -p tsconfig.build.json && vitest run',
  start: 'tsc -p tsconfig.build.json && reactor run',
  dev: 'reactor dev',
  types: 'tsc -p tsconfig.build.json && reactor types > src/app-types.ts',
};

/** Files of `templates/common` a template does without (the Python template's model half is Python). */
const COMMON_SKIPPED: Partial<Record<InitTemplate, string[]>> = { python: ['src/worker.ts'] };

/**
 * The `$schema` of a generated `reactor.yaml`: relative to the file, into the `@reactor/cli` the
 * project installed (vendored or from the workspace), so it always matches the framework in use
 * and needs no network (the framework is not published under a URL).
 */
export const MANIFEST_SCHEMA_PATH = `node_modules/@reactor/cli/${MANIFEST_SCHEMA_FILE}`;

function manifestText(modelName: string, cls: string, gpus: number, template: InitTemplate): string {
  const python =
    template === 'python'
      ? [
          '  # The Python of the worker (worker/app_worker.py); REACTOR_PYTHON overrides it.',
          '  python:',
          '    interpreter: python3',
          '    # Its import path: `reactor dev` watches it (a .py edit loads the ranks again; a .ts edit keeps them).',
          '    path: [worker]',
        ]
      : [];
  return [
    // Editors with the YAML language server check and complete this file against the schema of the installed framework.
    `# yaml-language-server: $schema=${MANIFEST_SCHEMA_PATH}`,
    '# What `reactor run` serves (paths are relative to this file).',
    'model:',
    `  name: ${modelName}`,
    '  version: 0.1.0',
    '  resources:',
    '    gpu:',
    `      count: ${gpus}`,
    'runtime:',
    `  import: dist/index.js:${cls}App`,
    '  config: config.yaml',
    ...python,
    'server:',
    '  host: 127.0.0.1',
    '  port: 8080',
    '',
  ].join('\n');
}

/** Packs the framework packages into `vendor` (the generated project installs them from there): package name -> `file:vendor/<tarball>`. */
export async function packFramework(vendor: string): Promise<Record<string, string>> {
  mkdirSync(vendor, { recursive: true });
  const specs: Record<string, string> = {};
  for (const p of FRAMEWORK_PACKAGES) {
    const dir = frameworkDir(p);
    if (!dir) fail(CliErrorCode.InitFailed, `@reactor/${p} is not installed next to @reactor/cli (${here}); reinstall @reactor/cli`);
    const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name: string; version: string };
    if (!existsSync(join(dir, 'dist', 'index.js'))) {
      fail(CliErrorCode.InitFailed, `${pkg.name} is not built (${join(dir, 'dist')} is missing); run "pnpm build" in ${dirname(dirname(dir))} first`);
    }
    try {
      await promisify(execFile)('pnpm', ['pack', '--pack-destination', vendor], { cwd: dir });
    } catch (err) {
      fail(CliErrorCode.InitFailed, `packing ${pkg.name} failed (is pnpm on PATH?): ${(err as Error).message}`, err);
    }
    const file = `${pkg.name.replace('@', '').replace('/', '-')}-${pkg.version}.tgz`;
    if (!existsSync(join(vendor, file))) fail(CliErrorCode.InitFailed, `pnpm pack of ${pkg.name} did not write ${file}`);
    specs[pkg.name] = `file:vendor/${file}`;
  }
  return specs;
}

/**
 * Writes a new project into `o.dir`.
 * @throws ReactorError `init_target_exists`, `init_invalid_name`, `init_unknown_template`, `init_not_writable`, `init_failed`, `cli_usage`.
 */
export async function initProject(o: InitOptions): Promise<InitResult> {
  const { target, name, template, gpus } = checkInput(o);
  const workspace = workspaceFor(target);
  const cls = classPrefix(name);
  const modelName =
    name
      .replace(/^@[^/]+\//, '')
      .replace(/[^a-z0-9._-]/g, '-')
      .replace(/^[^a-z0-9]+/, '') || 'app';
  const parent = dirname(target);
  let staging: string;
  try {
    mkdirSync(parent, { recursive: true });
    staging = mkdtempSync(join(parent, `.${basename(target)}.reactor-init-`));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EACCES' || code === 'EPERM' || code === 'EROFS') {
      fail(CliErrorCode.InitNotWritable, `cannot write in ${parent} (${code}): pick a folder you may write to, or fix its permissions`, err);
    }
    fail(CliErrorCode.InitFailed, `cannot create ${target}: ${(err as Error).message}`, err);
  }
  try {
    const install = workspace ? 'pnpm install    # in the workspace root: links the new app' : 'pnpm install';
    const vars = { APP_NAME: name, APP_CLASS: cls, TYPES_NAME: typesName(name), TEMPLATE: template, INSTALL: install };
    copyTemplate('common', staging, vars);
    copyTemplate(template, staging, vars);
    for (const skipped of COMMON_SKIPPED[template] ?? []) rmSync(join(staging, skipped));
    writeFileSync(join(staging, 'reactor.yaml'), manifestText(modelName, cls, gpus, template));
    const buildBase = workspace ? '../../tsconfig.base.json' : './tsconfig.json';
    writeFileSync(
      join(staging, 'tsconfig.build.json'),
      json({ extends: buildBase, compilerOptions: { rootDir: 'src', outDir: 'dist', noEmit: false }, include: ['src'] }),
    );
    const deps: Record<string, string> = {};
    const devDeps: Record<string, string> = {};
    if (workspace) {
      for (const p of APP_PACKAGES) (p === 'client' ? devDeps : deps)[`@reactor/${p}`] = 'workspace:*';
      for (const [k, v] of Object.entries(THIRD_PARTY.dependencies)) deps[k] = workspace ? 'catalog:' : v;
      for (const [k, v] of Object.entries(THIRD_PARTY.devDependencies)) devDeps[k] = workspace ? 'catalog:' : v;
      writeFileSync(
        join(staging, 'tsconfig.json'),
        json({ extends: '../../tsconfig.base.json', compilerOptions: { rootDir: '.', noEmit: true, customConditions: ['source'] }, include: ['src', 'test'] }),
      );
    } else {
      const specs = await packFramework(join(staging, 'vendor'));
      for (const p of APP_PACKAGES) (p === 'client' ? devDeps : deps)[`@reactor/${p}`] = specs[`@reactor/${p}`]!;
      Object.assign(deps, THIRD_PARTY.dependencies);
      Object.assign(devDeps, THIRD_PARTY.devDependencies);
      writeFileSync(join(staging, 'tsconfig.json'), json({ compilerOptions: { ...COMPILER_OPTIONS, rootDir: '.', noEmit: true }, include: ['src', 'test'] }));
      writeFileSync(
        join(staging, 'pnpm-workspace.yaml'),
        [
          '# The framework packages are not on the npm registry: `reactor init` packed them into vendor/,',
          '# and these overrides make every reference to them (theirs included) use those tarballs.',
          'overrides:',
          ...Object.entries(specs).map(([k, v]) => `  '${k}': ${v}`),
          '',
          '# pnpm runs only the install scripts allowed here.',
          'allowBuilds:',
          '  # native POSIX shared memory for the runner (it falls back to /dev/shm files without it)',
          '  shm-typed-array: true',
          '  # checks its prebuilt libvips binaries (JPEG encoding of frames)',
          '  sharp: true',
          '  # pulled in by vite; its platform binary comes as an optional dependency',
          '  esbuild: false',
          '  # pulled in by @google-cloud/agones-sdk (reactor run --agones); its postinstall only prints a notice',
          '  protobufjs: false',
          '',
        ].join('\n'),
      );
    }
    writeFileSync(
      join(staging, 'package.json'),
      json({
        name,
        version: '0.1.0',
        private: true,
        type: 'module',
        engines: { node: '>=20.19' },
        scripts:
          template === 'python'
            ? // The worker's TypedDicts too (its Input and Result), so the Python keys follow the TypeScript interfaces.
              { ...SCRIPTS, types: `${SCRIPTS.types} && reactor types --python > worker/app_types.py` }
            : SCRIPTS,
        dependencies: sorted(deps),
        devDependencies: sorted(devDeps),
      }),
    );
    chmodSync(staging, 0o755);
    renameSync(staging, target);
  } catch (err) {
    rmSync(staging, { recursive: true, force: true });
    if (err instanceof ReactorError) throw err;
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EACCES' || code === 'EPERM') fail(CliErrorCode.InitNotWritable, `cannot write ${target} (${code}): ${(err as Error).message}`, err);
    if (code === 'ENOTEMPTY' || code === 'EEXIST')
      fail(CliErrorCode.InitTargetExists, `${target} was filled while reactor init wrote the project; pick a new or empty folder`, err);
    fail(CliErrorCode.InitFailed, `writing ${target} failed: ${(err as Error).message}`, err);
  }
  const from = relative(o.cwd ?? process.cwd(), target) || '.';
  const nextSteps = workspace
    ? [`cd ${relative(o.cwd ?? process.cwd(), workspace) || '.'} && pnpm install`, `cd ${relative(o.cwd ?? process.cwd(), target)} && pnpm start`]
    : [
        `cd ${from}`,
        'pnpm install',
        // The ranks' Python: checked by doctor; REACTOR_PYTHON picks another when the python3 on PATH lacks NumPy or torch.
        ...(template === 'python'
          ? ['pnpm exec reactor doctor   # NumPy and torch; if missing: export REACTOR_PYTHON=/usr/bin/python3 (a Python that has them)']
          : []),
        'pnpm test',
        'pnpm start',
      ];
  return { dir: target, name, template, mode: workspace ? 'workspace' : 'standalone', nextSteps };
}

function sorted(o: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(o).sort(([a], [b]) => a.localeCompare(b)));
}
