/**
 * What `reactor` loads before it does anything. Each command loads its own module on use, so
 * `reactor --version` and `--help` load only the argument parser; `reactor run` (and schema,
 * doctor) pays for what `commands.js` imports. werift (WebRTC, about 0.4 s of CPU to import on the
 * 2-vCPU development machine, a third of `reactor run`'s start) is loaded with the first WebRTC
 * offer or track, and the MP4 muxer (mediabunny) with the first clip or recording: a server never
 * offered WebRTC never loads werift. The packages are read through a module resolve hook in a real
 * node process, so an eager value import of either, added anywhere under the CLI, fails this test.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(root, 'packages/cli/dist/main.js');
const dir = mkdtempSync(join(tmpdir(), 'reactor-cli-startup-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The npm packages `node <args>` resolved, in order (a hook registered before the entry point). */
function packagesLoaded(args: string[]): string[] {
  const hook = join(dir, 'hook.mjs');
  writeFileSync(
    hook,
    [
      "import { appendFileSync } from 'node:fs';",
      'const seen = new Set();',
      'export async function resolve(spec, ctx, next) {',
      '  const r = await next(spec, ctx);',
      '  const m = r.url.match(/.*node_modules\\/((?:@[^/]+\\/)?[^/]+)/);',
      `  if (m && !seen.has(m[1])) { seen.add(m[1]); appendFileSync(${JSON.stringify(join(dir, 'loaded.txt'))}, m[1] + '\\n'); }`,
      '  return r;',
      '}',
    ].join('\n'),
  );
  const register = join(dir, 'register.mjs');
  writeFileSync(register, `import { register } from 'node:module';\nregister(${JSON.stringify(pathToFileURL(hook).href)});\n`);
  rmSync(join(dir, 'loaded.txt'), { force: true });
  const r = spawnSync(process.execPath, ['--import', pathToFileURL(register).href, ...args], { encoding: 'utf8', timeout: 30_000 });
  expect(r.status, r.stderr).toBe(0);
  return readFileSync(join(dir, 'loaded.txt'), 'utf8').trim().split('\n');
}

describe('reactor at start', () => {
  it('reactor run loads the server, runtime and codecs it needs, and neither werift nor the MP4 muxer', () => {
    // The module `reactor run` (and schema, doctor) loads before it reads reactor.yaml: all it imports eagerly.
    const commands = pathToFileURL(join(root, 'packages/cli/dist/commands.js')).href;
    const loaded = packagesLoaded(['--input-type=module', '-e', `await import(${JSON.stringify(commands)})`]);
    // The hook sees the packages the CLI does load (so an empty list cannot pass).
    expect(loaded).toEqual(expect.arrayContaining(['class-validator', 'ws', 'sharp', 'prom-client']));
    expect(loaded.filter((p) => p === 'werift' || p.startsWith('@shinyoshiaki') || p === '@peculiar/x509' || p === 'mediabunny')).toEqual([]);
  });

  it('reactor --version and --help load only the argument parser (each command loads its module on use)', () => {
    expect(packagesLoaded([cli, '--version'])).toEqual(['cac']);
    expect(packagesLoaded([cli, '--help'])).toEqual(['cac']);
  });
});
