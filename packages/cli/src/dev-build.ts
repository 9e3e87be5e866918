/**
 * `reactor dev`'s build: the TypeScript compiler API kept in the supervisor process, one builder
 * program after another (`createEmitAndSemanticDiagnosticsBuilderProgram` with the previous one),
 * so an edit re-parses the files that changed, re-checks what they affect and writes only the
 * outputs that changed; the standard library and the dependencies' declarations are parsed once.
 * Same result as `tsc -p tsconfig.build.json`, except that a build with errors writes nothing
 * (the last good build keeps serving).
 */
import { statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import type * as TS from 'typescript';

/** The outcome of one build. */
export type BuildResult = { ok: true; emitted: number } | { ok: false; errors: string };

/** The incremental build of one tsconfig (its `include`, read again each time: new files are seen). */
export class IncrementalBuild {
  readonly #ts: typeof TS;
  readonly #tsconfig: string;
  #program: TS.EmitAndSemanticDiagnosticsBuilderProgram | undefined;
  /** Parsed source files by path, with the mtime they were read at (the lib and dependency declarations stay). */
  readonly #files = new Map<string, { mtimeMs: number; file: TS.SourceFile }>();

  constructor(ts: typeof TS, tsconfig: string) {
    this.#ts = ts;
    this.#tsconfig = resolve(tsconfig);
  }

  /** Builds; `changed` are the files the watcher reported (dropped from the cache whatever their mtime). */
  build(changed: readonly string[] = []): BuildResult {
    const ts = this.#ts;
    for (const f of changed) this.#files.delete(resolve(f));
    const dir = dirname(this.#tsconfig);
    const read = ts.readConfigFile(this.#tsconfig, ts.sys.readFile);
    if (read.error) return { ok: false, errors: this.#format([read.error], dir) };
    const parsed = ts.parseJsonConfigFileContent(read.config, ts.sys, dir, undefined, this.#tsconfig);
    if (parsed.errors.length > 0) return { ok: false, errors: this.#format(parsed.errors, dir) };
    const host = ts.createIncrementalCompilerHost(parsed.options);
    const getSourceFile = host.getSourceFile.bind(host);
    host.getSourceFile = (fileName, languageVersion, onError, shouldCreate) => {
      let mtimeMs = -1;
      try {
        mtimeMs = statSync(fileName).mtimeMs;
      } catch {
        // not there: the compiler says so
      }
      const hit = this.#files.get(fileName);
      if (hit && hit.mtimeMs === mtimeMs) return hit.file;
      const file = getSourceFile(fileName, languageVersion, onError, shouldCreate);
      if (file && mtimeMs >= 0) this.#files.set(fileName, { mtimeMs, file });
      return file;
    };
    // No .tsbuildinfo on disk: the previous program, in memory, is the incremental state.
    const options = { ...parsed.options, incremental: false, tsBuildInfoFile: undefined };
    const program = ts.createEmitAndSemanticDiagnosticsBuilderProgram(
      parsed.fileNames,
      options,
      host,
      this.#program,
      ts.getConfigFileParsingDiagnostics(parsed),
    );
    this.#program = program;
    const diagnostics = [
      ...program.getOptionsDiagnostics(),
      ...program.getGlobalDiagnostics(),
      ...program.getSyntacticDiagnostics(),
      ...program.getSemanticDiagnostics(),
    ];
    const errors = diagnostics.filter((d) => d.category === ts.DiagnosticCategory.Error);
    if (errors.length > 0) {
      // The files that failed are checked again next time (the builder would otherwise think them done).
      this.#program = undefined;
      return { ok: false, errors: this.#format(errors, dir) };
    }
    let emitted = 0;
    const writeFile: TS.WriteFileCallback = (name, text, bom, onError, sources, data) => {
      emitted++;
      host.writeFile(name, text, bom, onError, sources, data);
    };
    const result = program.emit(undefined, writeFile);
    if (result.emitSkipped) return { ok: false, errors: this.#format(result.diagnostics, dir) || 'the TypeScript emit was skipped' };
    return { ok: true, emitted };
  }

  #format(diagnostics: readonly TS.Diagnostic[], dir: string): string {
    const ts = this.#ts;
    return ts.formatDiagnostics(diagnostics, { getCanonicalFileName: (f) => f, getCurrentDirectory: () => dir, getNewLine: () => '\n' });
  }
}
