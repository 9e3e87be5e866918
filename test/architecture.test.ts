/**
 * The layout shows the architecture: each package and app (every folder of packages/ and apps/)
 * depends on exactly what its sources import, the packages form the intended layers, and no
 * folder of a package, nor any file, imports (even type-only) one that imports it back.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { builtinModules } from 'node:module';
import { describe, expect, it } from 'vitest';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
/** Every package and every app: a new one is covered (and needs its row in {@link allowed}). */
const packages = ['packages', 'apps'].flatMap((group) =>
  readdirSync(join(root, group))
    .map((p) => join(root, group, p))
    .filter((d) => {
      try {
        return statSync(join(d, 'package.json')).isFile();
      } catch {
        return false;
      }
    }),
);

/** Which workspace packages each may import: the layers, lowest first. */
const allowed: Record<string, string[]> = {
  '@reactor/log': [],
  '@reactor/protocol': [],
  '@reactor/tfjs-backend': [],
  '@reactor/test-kit': [],
  '@reactor/access': ['@reactor/protocol'],
  '@reactor/client': ['@reactor/protocol'],
  '@reactor/distributed': ['@reactor/log', '@reactor/protocol'],
  '@reactor/viewer': ['@reactor/protocol', '@reactor/client'],
  '@reactor/runtime': ['@reactor/log', '@reactor/protocol'],
  '@reactor/server': ['@reactor/log', '@reactor/protocol', '@reactor/access', '@reactor/runtime', '@reactor/viewer'],
  '@reactor/agones': ['@reactor/log', '@reactor/protocol', '@reactor/runtime', '@reactor/server'],
  '@reactor/router': ['@reactor/log', '@reactor/protocol', '@reactor/access'],
  '@reactor/cli': ['@reactor/log', '@reactor/access', '@reactor/runtime', '@reactor/server', '@reactor/router', '@reactor/distributed', '@reactor/agones'],
  'create-reactor': ['@reactor/protocol', '@reactor/cli'],
  '@reactor/app-video': ['@reactor/log', '@reactor/protocol', '@reactor/runtime', '@reactor/distributed', '@reactor/client', '@reactor/tfjs-backend'],
  '@reactor/app-camera': ['@reactor/runtime', '@reactor/distributed'],
  '@reactor/app-seed-video': ['@reactor/protocol', '@reactor/runtime', '@reactor/distributed'],
  '@reactor/app-enhance': ['@reactor/log', '@reactor/protocol', '@reactor/runtime', '@reactor/distributed', '@reactor/tfjs-backend'],
  '@reactor/app-world': ['@reactor/protocol', '@reactor/runtime', '@reactor/distributed'],
};

/** A cycle written from its smallest file, so the same cycle always reads the same. */
function canonical(cycle: string[]): string {
  const ring = cycle.slice(0, -1);
  const start = ring.indexOf([...ring].sort()[0]!);
  const turned = [...ring.slice(start), ...ring.slice(0, start)];
  return [...turned, turned[0]].join(' -> ');
}

/** Every elementary cycle of `edges` that a depth-first walk finds (each once, canonical). */
function findCycles(edges: Map<string, Set<string>>): string[] {
  const cycles = new Set<string>();
  const state = new Map<string, 'open' | 'done'>();
  const visit = (n: string, path: string[]): void => {
    if (state.get(n) === 'done') return;
    if (state.get(n) === 'open') {
      cycles.add(canonical([...path.slice(path.indexOf(n)), n]));
      return;
    }
    state.set(n, 'open');
    for (const m of edges.get(n) ?? []) visit(m, [...path, n]);
    state.set(n, 'done');
  };
  for (const n of edges.keys()) visit(n, []);
  return [...cycles].sort();
}

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    if (statSync(p).isDirectory()) out.push(...sourceFiles(p));
    else if (p.endsWith('.ts') && !p.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

/** Every module specifier a file imports or re-exports, type-only and dynamic imports included. */
function specifiers(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const found: string[] = [];
  for (const m of text.matchAll(/(?:^|\n)\s*(?:import|export)\s[^'";]*?from\s*['"]([^'"]+)['"]/g)) found.push(m[1]!);
  for (const m of text.matchAll(/(?:^|\n)\s*import\s*['"]([^'"]+)['"]/g)) found.push(m[1]!);
  for (const m of text.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g)) found.push(m[1]!);
  return found;
}

function packageName(spec: string): string {
  const parts = spec.split('/');
  return spec.startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0]!;
}

const builtins = new Set(builtinModules);

/** Dependencies a package loads without an import statement, and why. */
const loadedWithoutImport: Record<string, string> = {
  'shm-typed-array': '@reactor/distributed loads it with createRequire, so a failed native build falls back to /dev/shm files',
  '@reactor/protocol':
    '@reactor/viewer serves its compiled files to the browser (the client SDK imports them); it resolves the folder (its dashboard page imports only its types)',
  'class-transformer': "@reactor/runtime: class-validator-jsonschema's peer dependency, which it requires at run time",
  '@upscalerjs/esrgan-slim': '@reactor/app-enhance reads its weight files from the folder Node resolves for it (weights.ts), never imports it',
  '@upscalerjs/esrgan-medium': '@reactor/app-enhance reads its weight files from the folder Node resolves for it (weights.ts), never imports it',
  '@upscalerjs/esrgan-thick': '@reactor/app-enhance reads its weight files from the folder Node resolves for it (weights.ts), never imports it',
};

/** Entry files (they re-export every folder, so they stand outside the folder graph). */
const ENTRIES = new Set(['index.ts', 'internal.ts', 'testing.ts']);

describe('architecture', () => {
  for (const dir of packages) {
    const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
      name: string;
      dependencies?: Record<string, string>;
      optionalDependencies?: Record<string, string>;
      peerDependencies?: Record<string, string>;
    };
    const srcDirs = ['src', 'viewer']
      .map((d) => join(dir, d))
      .filter((d) => {
        try {
          return statSync(d).isDirectory();
        } catch {
          return false;
        }
      });
    const files = srcDirs.flatMap(sourceFiles);

    it(`${manifest.name} has a row in the layer table`, () => {
      expect(Object.keys(allowed)).toContain(manifest.name);
    });

    it(`${manifest.name} depends on exactly the packages its sources import, within its layer`, () => {
      // An optional peer (@opentelemetry/api for the runtime) is declared there: the user installs it.
      const declared = new Set([
        ...Object.keys(manifest.dependencies ?? {}),
        ...Object.keys(manifest.optionalDependencies ?? {}),
        ...Object.keys(manifest.peerDependencies ?? {}),
      ]);
      const used = new Set<string>();
      for (const f of files) {
        for (const s of specifiers(f)) {
          if (s.startsWith('.') || s.startsWith('node:') || builtins.has(s)) continue;
          used.add(packageName(s));
        }
      }
      const undeclared = [...used].filter((p) => !declared.has(p)).sort();
      const unused = [...declared].filter((p) => !used.has(p) && !loadedWithoutImport[p]).sort();
      const ours = [...used]
        .filter((p) => p.startsWith('@reactor/'))
        .filter((p) => !(allowed[manifest.name] ?? []).includes(p))
        .sort();
      expect({ undeclared, unused, importsAboveItsLayer: ours }).toEqual({ undeclared: [], unused: [], importsAboveItsLayer: [] });
    });

    it(`${manifest.name}: no cycle between its folders (type-only imports included)`, () => {
      const folderOf = (f: string) => relative(dir, dirname(f)) || '.';
      const edges = new Map<string, Set<string>>();
      for (const f of files.filter((x) => !ENTRIES.has(x.slice(dirname(x).length + 1)))) {
        const from = folderOf(f);
        for (const s of specifiers(f)) {
          if (!s.startsWith('.')) continue;
          const to = folderOf(resolve(dirname(f), s));
          if (to === from) continue;
          if (!edges.has(from)) edges.set(from, new Set());
          edges.get(from)!.add(to);
        }
      }
      const cycles: string[] = [];
      const state = new Map<string, 'open' | 'done'>();
      const visit = (n: string, path: string[]): void => {
        if (state.get(n) === 'done') return;
        if (state.get(n) === 'open') {
          cycles.push([...path.slice(path.indexOf(n)), n].join(' -> '));
          return;
        }
        state.set(n, 'open');
        for (const m of edges.get(n) ?? []) visit(m, [...path, n]);
        state.set(n, 'done');
      };
      for (const n of edges.keys()) visit(n, []);
      expect(cycles).toEqual([]);
    });

    it(`${manifest.name}: no cycle between its files (type-only imports included)`, () => {
      const known = new Set(files);
      const target = (from: string, spec: string): string | undefined => {
        const base = resolve(dirname(from), spec);
        return [base.replace(/\.js$/, '.ts'), `${base}.ts`, join(base, 'index.ts')].find((c) => known.has(c));
      };
      const edges = new Map<string, Set<string>>();
      for (const f of files) {
        const from = relative(dir, f);
        for (const s of specifiers(f)) {
          if (!s.startsWith('.')) continue;
          const to = target(f, s);
          if (to === undefined) continue;
          if (!edges.has(from)) edges.set(from, new Set());
          edges.get(from)!.add(relative(dir, to));
        }
      }
      const cycles = findCycles(edges);
      expect(cycles).toEqual([]);
    });
  }
});

/** The server's wings (issue 36): its folders under src/, each one concern; composition files sit at the root. */
const SERVER_WINGS = ['base', 'dashboard', 'http', 'intake', 'recording', 'video', 'webrtc', 'ws'];
/** The wings that carry media (frames and audio in or out). */
const MEDIA_WINGS = ['ws', 'webrtc', 'video', 'intake', 'recording'];

describe('the server wings (issue 36)', () => {
  const src = join(root, 'packages/server/src');
  /** Wing (or `.`, the root's composition files) -> the wings its files import, with the importing file. */
  const imports = new Map<string, Map<string, string[]>>();
  const wingOf = (file: string) => relative(src, file).split('/').slice(0, -1)[0] ?? '.';
  for (const f of sourceFiles(src)) {
    const from = wingOf(f);
    for (const s of specifiers(f)) {
      if (!s.startsWith('.')) continue;
      const to = wingOf(resolve(dirname(f), s));
      if (to === from) continue;
      if (!imports.has(from)) imports.set(from, new Map());
      const by = imports.get(from)!;
      by.set(to, [...(by.get(to) ?? []), relative(src, f)]);
    }
  }
  const importsOf = (wing: string) => [...(imports.get(wing)?.keys() ?? [])].sort();

  it('packages/server/src is the eight wing folders and the composition files at its root', () => {
    const folders = readdirSync(src).filter((e) => statSync(join(src, e)).isDirectory());
    expect(folders.sort()).toEqual(SERVER_WINGS);
  });

  it('webrtc/ and ws/ never import each other', () => {
    expect({ webrtc: importsOf('webrtc').filter((w) => w === 'ws'), ws: importsOf('ws').filter((w) => w === 'webrtc') }).toEqual({ webrtc: [], ws: [] });
  });

  it('recording/ and dashboard/ import only video/ and base/', () => {
    const beyond = (wing: string) => importsOf(wing).filter((w) => w !== 'video' && w !== 'base');
    expect({ recording: beyond('recording'), dashboard: beyond('dashboard') }).toEqual({ recording: [], dashboard: [] });
  });

  it('http/ imports no media wing', () => {
    expect(importsOf('http').filter((w) => MEDIA_WINGS.includes(w))).toEqual([]);
  });

  it('base/ imports no other wing, and no wing imports the composition files at the root', () => {
    const intoRoot = SERVER_WINGS.filter((w) => importsOf(w).includes('.')).map((w) => `${w}: ${imports.get(w)!.get('.')!.join(', ')}`);
    expect({ base: importsOf('base'), intoRoot }).toEqual({ base: [], intoRoot: [] });
  });

  it('the router never imports the server (sources and manifest)', () => {
    const dir = join(root, 'packages/router');
    const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
      dependencies?: Record<string, string>;
      devDependencies?: Record<string, string>;
    };
    const declared = Object.keys({ ...manifest.dependencies, ...manifest.devDependencies }).filter((p) => p === '@reactor/server');
    const imported = ['src', 'test']
      .map((d) => join(dir, d))
      .filter((d) => statSync(d, { throwIfNoEntry: false })?.isDirectory())
      .flatMap(sourceFiles)
      .filter((f) => specifiers(f).some((s) => packageName(s) === '@reactor/server'))
      .map((f) => relative(dir, f));
    expect({ declared, imported }).toEqual({ declared: [], imported: [] });
  });
});
