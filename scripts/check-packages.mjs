#!/usr/bin/env node
/**
 * Publish-readiness of every package under packages/* (part of `pnpm lint`): each one is packed
 * with `pnpm pack` (as it would be published: workspace:/catalog: versions replaced, only its
 * `files`), and the tarball is checked by publint (package.json fields against the packed files)
 * and by Are the Types Wrong (@arethetypeswrong/core, the engine of the `attw` CLI: every export
 * resolves to JavaScript and to its types under Node 16+ ESM and bundlers). The packages are ESM
 * only (Node >= 20.19), so the `esm-only` profile of attw applies: the node10 and node16-from-CJS
 * resolutions are not required. Nothing here uses the network.
 *
 * Usage: node scripts/check-packages.mjs [packages/<name> ...]   (default: every packages/*)
 * Exit 1 and one line per problem when any package has one.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { promisify } from 'node:util';
import { checkPackage, createPackageFromTarballData } from '@arethetypeswrong/core';
import { publint } from 'publint';
import { formatMessage } from 'publint/utils';

const root = resolve(import.meta.dirname, '..');
/** attw's `esm-only` profile: resolutions an ESM-only package need not serve. */
const IGNORED_RESOLUTIONS = ['node10', 'node16-cjs'];

const dirs =
  process.argv.length > 2
    ? process.argv.slice(2).map((d) => resolve(d))
    : readdirSync(join(root, 'packages'))
        .map((d) => join(root, 'packages', d))
        .filter((d) => existsSync(join(d, 'package.json')))
        .sort();

// The check packs what would be published, dist/ included: an unbuilt package would only show
// every export as missing.
const unbuilt = dirs.filter((d) => !JSON.parse(readFileSync(join(d, 'package.json'), 'utf8')).private && !existsSync(join(d, 'dist')));
if (unbuilt.length > 0) {
  console.error(`not built: ${unbuilt.map((d) => relative(root, d)).join(', ')} (no dist/). Run \`pnpm build\` first: this check packs the built files.`);
  process.exit(1);
}

const scratch = mkdtempSync(join(tmpdir(), 'reactor-check-packages-'));
const problems = [];

/** `pnpm pack` of `dir` into its own folder of the scratch dir: the tarball's bytes. */
async function pack(dir, i) {
  const dest = join(scratch, String(i));
  await promisify(execFile)('pnpm', ['pack', '--pack-destination', dest], { cwd: dir });
  const [file] = readdirSync(dest).filter((f) => f.endsWith('.tgz'));
  if (!file) throw new Error(`pnpm pack wrote no tarball for ${dir}`);
  return new Uint8Array(readFileSync(join(dest, file)));
}

async function check(dir, i) {
  const where = relative(root, dir);
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  if (pkg.private) return;
  const tarball = await pack(dir, i);
  const lint = await publint({ pack: { tarball: tarball.slice().buffer }, strict: true });
  for (const m of lint.messages) problems.push(`${where}: publint ${m.type}: ${formatMessage(m, lint.pkg) ?? m.code}`);
  // A bin-only package (create-reactor) has no module to import, so no types to check.
  if (!pkg.exports && !pkg.main && !pkg.types) return;
  const analysis = await checkPackage(createPackageFromTarballData(tarball));
  if (!analysis.types) {
    problems.push(`${where}: attw: the package ships no types`);
    return;
  }
  for (const p of analysis.problems) {
    if ('resolutionKind' in p && IGNORED_RESOLUTIONS.includes(p.resolutionKind)) continue;
    const at = 'entrypoint' in p ? ` (${p.entrypoint}, ${p.resolutionKind})` : 'fileName' in p ? ` (${p.fileName})` : '';
    problems.push(`${where}: attw ${p.kind}${at}: see https://github.com/arethetypeswrong/arethetypeswrong.github.io/blob/main/docs/problems/${p.kind}.md`);
  }
}

try {
  // Two at a time: CI has two cores.
  const queue = dirs.map((d, i) => [d, i]);
  await Promise.all(
    [0, 1].map(async () => {
      for (let next = queue.shift(); next; next = queue.shift()) await check(...next);
    }),
  );
} finally {
  rmSync(scratch, { recursive: true, force: true });
}

if (problems.length > 0) {
  console.error(
    `${problems.join('\n')}\n\n${problems.length} problem(s): fix the package.json fields (exports with types, files, main/types, sideEffects) they name.`,
  );
  process.exitCode = 1;
} else {
  console.log(`publint and attw (esm-only): ${dirs.length} packages clean`);
}
