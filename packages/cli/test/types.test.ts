// `reactor types` through the built bin: from the manifest's app, from a running server, and a
// server that is not there.
import 'reflect-metadata';
import { execFile, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { createServer } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { IsIn, IsInt, Max, Min } from 'class-validator';
import { silentLogger } from '@reactor/log';
import { event, InputField, InputState, Output, ReactorApp, reactorApp, UploadField, type UploadedFile, Video } from '@reactor/runtime';
import { serve } from '@reactor/server';
import { describe, expect, it } from 'vitest';
import { schemaToTypes } from '../src/types-command.js';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../../..');
const bin = resolve(here, '../dist/main.js');

function reactor(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(process.execPath, [bin, ...args], { cwd: repo }, (err, stdout, stderr) =>
      done({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

class KnobState extends InputState {
  @InputField({ default: 1, description: 'How fast.' }) @IsInt() @Min(1) @Max(9) speed!: number;
  @InputField({ default: 'red' }) @IsIn(['red', 'blue']) colour!: 'red' | 'blue';
}
class KnobOutput extends Output {
  @Video() main?: Video;
}
class Tick {
  constructor(readonly count: number) {}
}
@reactorApp({ state: KnobState, output: KnobOutput, messages: [Tick], name: 'knob-app', version: '2.0.0' })
class KnobApp extends ReactorApp<KnobState, void, void, Tick> {
  override generate(): void {}
  @event({ name: 'jump', description: 'Jump ahead.' })
  jump(): void {}
}

describe('reactor types', () => {
  it("writes the sample app's types (the committed fixture the type test compiles against is up to date)", async () => {
    const r = await reactor(['types']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe(readFileSync(resolve(repo, 'test/fixtures/video-app-types.ts'), 'utf8'));
  });

  it('pnpm types (reactor types > src/app-types.ts) gives no false stale-build warning; a real stale source still warns', () => {
    const dir = mkdtempSync(join(tmpdir(), 'reactor-types-stale-'));
    try {
      const runtime = JSON.stringify(resolve(repo, 'packages/runtime/dist/index.js'));
      writeFileSync(join(dir, 'reactor.yaml'), 'runtime:\n  import: dist/index.js:TinyApp\n');
      spawnSync('mkdir', ['-p', join(dir, 'src'), join(dir, 'dist')]);
      writeFileSync(join(dir, 'src/app.ts'), '// the source of dist/index.js\n');
      writeFileSync(join(dir, 'src/app-types.ts'), '// written by reactor types\n');
      writeFileSync(
        join(dir, 'dist/index.js'),
        [
          `import { InputState, Output, ReactorApp, reactorApp, Video } from ${runtime};`,
          'class Out extends Output {}',
          "Video({ width: 8, height: 8 })(Out.prototype, 'main');",
          'export class TinyApp extends ReactorApp { generate() {} }',
          "reactorApp({ name: 'tiny', version: '0.0.1', state: InputState, output: Out })(TinyApp);",
          '',
        ].join('\n'),
      );
      // The shell truncates src/app-types.ts (now newer than dist/) before reactor starts, as pnpm types does.
      const types = spawnSync('sh', ['-c', `${JSON.stringify(process.execPath)} ${JSON.stringify(bin)} types > src/app-types.ts`], {
        cwd: dir,
        encoding: 'utf8',
      });
      expect(types.status, types.stderr).toBe(0);
      expect(types.stderr).not.toMatch(/is older than/);
      expect(readFileSync(join(dir, 'src/app-types.ts'), 'utf8')).toContain('// The client types of tiny 0.0.1');
      // An edit after the build is still a stale build.
      writeFileSync(join(dir, 'src/app.ts'), '// edited after the build\nexport const x = 1;\n');
      const stale = spawnSync(process.execPath, [bin, 'types'], { cwd: dir, encoding: 'utf8' });
      expect(stale.stderr).toMatch(/dist\/index\.js is older than \S+src\/app\.ts/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('--python: the worker TypedDicts of an app of arrays, optionals, nested objects, literals and doc comments import in Python; --url is refused', () => {
    const dir = mkdtempSync(join(tmpdir(), 'reactor-types-py-'));
    try {
      const runtime = JSON.stringify(resolve(repo, 'packages/runtime/dist/index.js'));
      writeFileSync(join(dir, 'reactor.yaml'), 'runtime:\n  import: dist/index.js:RichApp\n');
      spawnSync('mkdir', ['-p', join(dir, 'dist')]);
      writeFileSync(
        join(dir, 'dist/index.js'),
        [
          `import { InputState, Output, ReactorApp, reactorApp, Video } from ${runtime};`,
          'class Out extends Output {}',
          "Video({ width: 8, height: 8 })(Out.prototype, 'main');",
          'export class RichApp extends ReactorApp { generate() {} }',
          "reactorApp({ name: 'rich', version: '0.0.1', state: InputState, output: Out })(RichApp);",
          '',
        ].join('\n'),
      );
      // The declarations tsc writes for such an app (the doc comments are what a user writes).
      writeFileSync(
        join(dir, 'dist/index.d.ts'),
        [
          `import { InputState, ReactorApp } from ${runtime};`,
          '/** A camera pose. */',
          'export interface Pose {',
          '  /** Metres, "world" frame. */',
          '  position: Float32Array;',
          '  yaw: number;',
          '}',
          '/**',
          ' * What every rank gets,',
          ' * over two lines.',
          ' */',
          'export interface RichInput {',
          '  prompt: string;',
          '  latents: Float32Array;',
          '  pose?: Pose;',
          "  mode: 'fast' | 'slow';",
          '  seed: number | null;',
          "  'frame-count': number;",
          '}',
          'export interface RichResult {',
          '  frames: Uint8Array;',
          '  shape: [number, number, number];',
          '  /** Says "hi" */',
          '  greeting: string;',
          '  /** A path such as C:\\\\models\\\\x (a backslash) */',
          '  where: string;',
          '}',
          'export declare class RichApp extends ReactorApp<InputState, RichInput, RichResult> {}',
          '',
        ].join('\n'),
      );
      const r = spawnSync(process.execPath, [bin, 'types', '--python'], { cwd: dir, encoding: 'utf8' });
      expect(r.status, r.stderr).toBe(0);
      writeFileSync(join(dir, 'app_types.py'), r.stdout);
      expect(r.stdout).toContain('    position: npt.NDArray[np.float32]\n');
      // A key that is not an identifier: the functional form, its doc comment as comment lines.
      expect(r.stdout).toContain('# What every rank gets,\n# over two lines.\nRichInput = TypedDict("RichInput", {');
      const py = spawnSync(
        process.env['REACTOR_PYTHON'] ?? '/usr/bin/python3',
        [
          '-c',
          [
            'import app_types as t',
            'print(sorted(t.Input.__required_keys__), sorted(t.Input.__optional_keys__))',
            'print(sorted(t.Result.__required_keys__), sorted(t.Pose.__required_keys__))',
          ].join('\n'),
        ],
        { cwd: dir, encoding: 'utf8' },
      );
      expect(py.status, `${py.stderr}\n${r.stdout}`).toBe(0);
      expect(py.stdout).toBe("['frame-count', 'latents', 'mode', 'prompt', 'seed'] ['pose']\n['frames', 'greeting', 'shape', 'where'] ['position', 'yaw']\n");
      const url = spawnSync(process.execPath, [bin, 'types', '--python', '--url', 'http://127.0.0.1:1'], { cwd: dir, encoding: 'utf8' });
      expect(url.status).toBe(1);
      expect(url.stderr).toMatch(/--python reads the app's declarations, not a server/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("reads a running server's GET /schema with --url", async () => {
    const server = await serve(KnobApp, { port: 0, logger: silentLogger });
    try {
      await server.loaded;
      const r = await reactor(['types', '--url', server.url, '--name', 'Knobs']);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toContain('// The client types of knob-app 2.0.0 (protocol 1), written by `reactor types`.');
      expect(r.stdout).toContain('export type Knobs = {');
      expect(r.stdout).toMatch(/set_speed: \{\n\s+\/\*\* How fast\. \*\/\n\s+speed: number;\n\s+\};/);
      expect(r.stdout).toMatch(/set_colour: \{\n\s+colour: "red" \| "blue";\n\s+\};/);
      expect(r.stdout).toContain('    /** Jump ahead. */\n    jump: Record<string, never>;');
      expect(r.stdout).toMatch(/tick: \{\n\s+count: unknown;\n\s+\};/);
      expect(r.stdout).toContain('  tracks: "main";');
    } finally {
      await server.close();
    }
  });

  it('says so when no server answers at --url', async () => {
    // A port that was free a moment ago.
    const port = await new Promise<number>((ok) => {
      const s = createServer().listen(0, '127.0.0.1', () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => ok(p));
      });
    });
    const r = await reactor(['types', '--url', `http://127.0.0.1:${port}`]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(
      new RegExp(`cannot reach http://127.0.0.1:${port}: .*is the app running \\(reactor run\\) at that address\\? \\[schema_unavailable\\]`),
    );
    expect(r.stdout).toBe('');
  });

  it('refuses a type name that is not an identifier', () => {
    expect(() => schemaToTypes({ app: { name: 'x', version: '1' }, protocol: 1, state: {}, commands: [], messages: [], tracks: [] }, 'my types')).toThrow(
      /--name must be a TypeScript identifier/,
    );
  });
});

class UploadState extends InputState {
  @UploadField({ mimeTypes: ['image/*'], description: 'A sketch.' }) sketch!: UploadedFile | null;
}
@reactorApp({ state: UploadState, output: KnobOutput, name: 'sketch-app', version: '1.0.0' })
class SketchApp extends ReactorApp<UploadState, void, void> {
  override generate(): void {}
}

describe('reactor types: the types say what the wire carries (a type test, compiled by tsc)', () => {
  it('types an upload state field as null until set, then the stored file (not the { uploadId } a command sends)', async () => {
    const server = await serve(SketchApp, { port: 0, logger: silentLogger });
    const dir = mkdtempSync(join(tmpdir(), 'reactor-types-'));
    try {
      await server.loaded;
      const r = await reactor(['types', '--url', server.url, '--name', 'SketchTypes']);
      expect(r.code, r.stderr).toBe(0);
      writeFileSync(join(dir, 'app-types.ts'), r.stdout);
      writeFileSync(
        join(dir, 'use.ts'),
        [
          "import type { SketchTypes } from './app-types.js';",
          "declare const state: SketchTypes['state'];",
          "declare const params: SketchTypes['commands']['set_sketch'];",
          '// @ts-expect-error null until a client sets it',
          'void state.sketch.uploadId;',
          'if (state.sketch !== null) {',
          '  const size: number = state.sketch.size;',
          '  const type: string = state.sketch.mimeType;',
          '  void [size, type, state.sketch.name, state.sketch.uploadId];',
          '}',
          '// A command still sends the reference alone.',
          'const ref: { uploadId: string } = params.sketch;',
          'void ref;',
          '',
        ].join('\n'),
      );
      const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
      const check = spawnSync(process.execPath, [tsc, '--noEmit', '--strict', '--module', 'nodenext', '--moduleResolution', 'nodenext', join(dir, 'use.ts')], {
        encoding: 'utf8',
        timeout: 60_000,
      });
      expect(check.status, `${check.stdout}${check.stderr}\n${r.stdout}`).toBe(0);
    } finally {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
