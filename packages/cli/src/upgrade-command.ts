/**
 * `reactor upgrade [dir]`: moves a project that `reactor init` wrote outside a workspace to the
 * framework of the CLI that runs it. The framework packages are packed afresh (as `reactor init`
 * packs them) into the project's `vendor/`, and its package.json dependencies and pnpm overrides
 * are pointed at the new tarballs. The project's own files are left as they are. Everything is
 * packed before anything is changed, so a failed pack leaves the project as it was.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join, relative, resolve } from 'node:path';
import { parseDocument } from 'yaml';
import { ReactorError } from '@reactor/runtime';
import { CliErrorCode } from './errors.js';
import { packFramework } from './init.js';

/** What {@link upgradeProject} changed: package name -> the tarball the project had, and the one it has now. */
export interface UpgradeResult {
  dir: string;
  from: Record<string, string>;
  to: Record<string, string>;
}

interface ProjectPackage {
  name?: string;
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
  [key: string]: unknown;
}

function notAProject(message: string): never {
  throw new ReactorError(CliErrorCode.UpgradeNotAProject, message);
}

/** The version in `file:vendor/reactor-runtime-0.1.0.tgz`. */
function vendoredVersion(spec: string): string {
  return /-(\d[^/]*)\.tgz$/.exec(spec)?.[1] ?? spec;
}

/**
 * Re-vendors the framework of this CLI into the project in `dir`.
 * @throws ReactorError `upgrade_not_a_project`, `init_failed` (a framework package not built or not packable).
 */
export async function upgradeProject(dir: string, cwd = process.cwd()): Promise<UpgradeResult> {
  const target = resolve(cwd, dir);
  const pkgFile = join(target, 'package.json');
  const wsFile = join(target, 'pnpm-workspace.yaml');
  if (!existsSync(pkgFile)) notAProject(`${target} has no package.json: run reactor upgrade in a project reactor init wrote, or pass its folder`);
  const pkg = JSON.parse(readFileSync(pkgFile, 'utf8')) as ProjectPackage;
  const deps = { ...pkg.dependencies, ...pkg.devDependencies };
  const ours = Object.entries(deps).filter(([k]) => k.startsWith('@reactor/'));
  if (ours.length === 0) notAProject(`${pkgFile} depends on no @reactor/ package: this is not a Reactor project`);
  if (ours.some(([, v]) => v.startsWith('workspace:')))
    notAProject(`${target} is an app of a workspace: it uses the workspace's own packages; update the workspace instead (git pull, then pnpm install)`);
  if (!ours.every(([, v]) => v.startsWith('file:vendor/')) || !existsSync(wsFile))
    notAProject(`${target} does not install the framework from vendor/ (as reactor init writes it): move its @reactor/ dependencies by hand`);

  // Pack first: a failure leaves the project as it was.
  const staging = mkdtempSync(join(target, '.vendor.reactor-upgrade-'));
  let specs: Record<string, string>;
  try {
    specs = await packFramework(staging);
  } catch (err) {
    rmSync(staging, { recursive: true, force: true });
    throw err;
  }
  const from = Object.fromEntries(ours);
  const to: Record<string, string> = {};
  for (const field of ['dependencies', 'devDependencies'] as const) {
    for (const name of Object.keys(pkg[field] ?? {})) {
      if (specs[name]) pkg[field]![name] = to[name] = specs[name];
    }
  }
  const ws = parseDocument(readFileSync(wsFile, 'utf8'));
  for (const [name, spec] of Object.entries(specs)) ws.setIn(['overrides', name], spec);
  const vendor = join(target, 'vendor');
  for (const f of readdirSync(vendor)) if (/^reactor-.*\.tgz$/.test(f)) rmSync(join(vendor, f));
  for (const f of readdirSync(staging)) renameSync(join(staging, f), join(vendor, f));
  rmSync(staging, { recursive: true, force: true });
  writeFileSync(wsFile, ws.toString());
  writeFileSync(pkgFile, `${JSON.stringify(pkg, null, 2)}\n`);
  return { dir: target, from, to };
}

/** `reactor upgrade [dir]`: the bin's side. */
export async function upgradeCommand(dir: string | undefined, cwd = process.cwd()): Promise<void> {
  const r = await upgradeProject(dir ?? '.', cwd);
  const versions = (m: Record<string, string>) => [...new Set(Object.values(m).map(vendoredVersion))].join(', ');
  const where = relative(cwd, r.dir) || '.';
  process.stdout.write(
    `Upgraded ${basename(r.dir)}: @reactor/* ${versions(r.from)} -> ${versions(r.to)} (vendor/ repacked; your files are unchanged)\n\nNext:\n${where === '.' ? '' : `  cd ${where}\n`}  pnpm install\n  pnpm test\n`,
  );
}
