/**
 * The published JSON Schema of `reactor.yaml` (`@reactor/cli/reactor.schema.json`) is what the
 * manifest's one declaration (packages/cli/src/manifest-sections.ts) generates, every example
 * manifest in the repository (the root's, each app's, each `reactor init` template's, every
 * manifest block of the README and docs) passes it, and it refuses what `loadManifest()` refuses
 * for an unknown key, at every level.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Ajv } from 'ajv';
import { afterAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { INIT_TEMPLATES, initProject } from '../packages/cli/src/init.js';
import { MANIFEST_SCHEMA_FILE, manifestJsonSchemaText } from '@reactor/cli';

const repo = resolve(import.meta.dirname, '..');
const committed = readFileSync(join(repo, 'packages/cli', MANIFEST_SCHEMA_FILE), 'utf8');
const ajv = new Ajv({ allErrors: true, strict: false });
const validate = ajv.compile(JSON.parse(committed) as object);
const scratch = mkdtempSync(join(tmpdir(), 'reactor-schema-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function problems(doc: unknown): string[] {
  return validate(doc) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message ?? ''} ${JSON.stringify(e.params)}`);
}

/** The ```yaml blocks of the README and docs that are manifests (a top-level `runtime:`). */
function docManifests(): Array<[string, unknown]> {
  const files = ['README.md', ...readdirSync(join(repo, 'docs')).map((f) => `docs/${f}`)].filter((f) => f.endsWith('.md'));
  const out: Array<[string, unknown]> = [];
  for (const f of files) {
    const text = readFileSync(join(repo, f), 'utf8');
    for (const [i, m] of [...text.matchAll(/```ya?ml\n([\s\S]*?)```/g)].entries()) {
      if (/^runtime:/m.test(m[1]!)) out.push([`${f} block ${i + 1}`, parseYaml(m[1]!)]);
    }
  }
  return out;
}

describe('reactor.schema.json', () => {
  it('is the schema the manifest declaration generates (run node packages/cli/scripts/manifest-schema.mjs after a change)', () => {
    expect(committed).toBe(manifestJsonSchemaText());
  });

  it('passes every manifest of the repository: the root, the apps and the README/docs blocks', () => {
    // Every reactor.yaml in git: the root's (apps/video) and each other app's.
    const files = execFileSync('git', ['ls-files', '*reactor.yaml'], { cwd: repo, encoding: 'utf8' }).split('\n').filter(Boolean);
    expect(files).toEqual(expect.arrayContaining(['reactor.yaml', 'apps/camera/reactor.yaml', 'apps/enhance/reactor.yaml', 'apps/seed-video/reactor.yaml']));
    const docs = docManifests();
    expect(docs.length).toBeGreaterThan(0);
    for (const f of files) expect(problems(parseYaml(readFileSync(join(repo, f), 'utf8'))), f).toEqual([]);
    for (const [name, doc] of docs) expect(problems(doc), name).toEqual([]);
  });

  it.each(INIT_TEMPLATES)('passes the reactor.yaml of a %s project, which names the schema on its first line', async (template) => {
    const ws = join(scratch, `ws-${template}`);
    mkdirSync(join(ws, 'apps'), { recursive: true });
    writeFileSync(join(ws, 'pnpm-workspace.yaml'), 'packages:\n  - apps/*\n');
    const { dir } = await initProject({ dir: `apps/demo-${template}`, template, cwd: ws });
    const text = readFileSync(join(dir, 'reactor.yaml'), 'utf8');
    expect(text.split('\n')[0]).toBe(`# yaml-language-server: $schema=node_modules/@reactor/cli/${MANIFEST_SCHEMA_FILE}`);
    expect(problems(parseYaml(text))).toEqual([]);
  });

  it('refuses an unknown key at every level, as loadManifest() does', () => {
    const ok = { runtime: { import: 'dist/index.js:App' } };
    expect(problems(ok)).toEqual([]);
    const bad: Array<[string, unknown]> = [
      ['top level', { ...ok, extra: 1 }],
      ['server', { ...ok, server: { prot: 8080 } }],
      ['server.video', { ...ok, server: { video: { keyframes: 2 } } }],
      ['server.video.tiers[]', { ...ok, server: { video: { tiers: [{ name: 'a', scale: 1, bitrate: 100_000, fps: 3 }] } } }],
      ['server.auth', { ...ok, server: { auth: { secrett: 'x' } } }],
      ['runtime', { runtime: { import: 'dist/index.js:App', weights: 'w' } }],
      ['runtime.python', { runtime: { import: 'dist/index.js:App', python: { interpreterr: 'python3' } } }],
      ['model', { ...ok, model: { cpu: 1 } }],
      ['model.resources', { ...ok, model: { resources: { tpu: {} } } }],
      ['model.resources.gpu', { ...ok, model: { resources: { gpu: { kind: 'H200' } } } }],
      ['agones', { ...ok, agones: { helth_interval_ms: 1000 } }],
      ['recording', { ...ok, recording: { keep: true } }],
      ['gpu', { ...ok, gpu: { sessions_per_gpu: 2, per_gpu: 2 } }],
    ];
    for (const [where, doc] of bad) expect(problems(doc).join('\n'), where).toMatch(/must NOT have additional properties/);
    expect(problems({ ...ok, server: { port: 'eighty' } }).join('\n')).toMatch(/\/server\/port must be integer/);
    expect(problems({ ...ok, gpu: { sessions_per_gpu: 0 } }).join('\n')).toMatch(/\/gpu\/sessions_per_gpu must be >= 1/);
    expect(problems({ ...ok, gpu: { slot_dir: '/tmp' } }).join('\n')).toMatch(/must have required property 'sessions_per_gpu'/);
  });
});
