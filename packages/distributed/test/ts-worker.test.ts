import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { DistributedRunner } from '../src/index.js';
import { captureLogger, expectNothingLeft, quiet, trackRunners } from './helpers.js';

// A TypeScript worker package as an application has one: src/*.ts run by the parent (here under
// vitest), dist/*.js run by the ranks.
const root = mkdtempSync(join(tmpdir(), 'reactor-ts-pkg-'));
mkdirSync(join(root, 'src'));
mkdirSync(join(root, 'dist'));
const srcIndex = pathToFileURL(new URL('../src/index.ts', import.meta.url).pathname).href;
const distIndex = pathToFileURL(new URL('../dist/index.js', import.meta.url).pathname).href;
const body = (from: string, marker: string) => `
import { DistributedWorker } from '${from}';
export class RolloutExhausted extends Error {}
export class TsWorker extends DistributedWorker {
  static moduleUrl = import.meta.url;
  load() {}
  generate(input) {
    if (input.exhausted) throw new RolloutExhausted('done');
    return { ranFrom: '${marker}', url: import.meta.url };
  }
  reset() {}
}
`;
writeFileSync(join(root, 'src', 'ts-worker.ts'), body(srcIndex, 'src').replace('generate(input)', 'generate(input: { exhausted?: boolean })'));
writeFileSync(join(root, 'dist', 'ts-worker.js'), body(distIndex, 'dist'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('DistributedRunner', () => {
  const track = trackRunners();

  it('runs a worker defined in TypeScript sources from its compiled dist/ sibling, and rebuilds its errors as the source classes', async () => {
    const mod = (await import(/* @vite-ignore */ pathToFileURL(join(root, 'src', 'ts-worker.ts')).href)) as Record<string, any>;
    expect(mod.TsWorker.moduleUrl).toMatch(/\/src\/ts-worker\.ts$/);
    const runner: DistributedRunner<any, any, any> = track(new DistributedRunner(mod.TsWorker, { worldSize: 2, logger: quiet }));
    await runner.start();
    const out = await runner.generate({});
    expect(out).toEqual({ ranFrom: 'dist', url: pathToFileURL(join(root, 'dist', 'ts-worker.js')).href });
    // The class the application imported (from src/) is the one instanceof must match.
    await expect(runner.generate({ exhausted: true })).rejects.toBeInstanceOf(mod.RolloutExhausted);
    expect(runner.healthy).toBe(true);
    await runner.shutdown();
    expectNothingLeft(runner);
  });

  it('warns loudly, naming both files and pnpm build, when a source changed after the compiled file was built', async () => {
    const mod = (await import(/* @vite-ignore */ pathToFileURL(join(root, 'src', 'ts-worker.ts')).href)) as Record<string, any>;
    const fresh = captureLogger();
    const a = track(new DistributedRunner(mod.TsWorker, { worldSize: 1, logger: fresh }));
    await a.start();
    expect(fresh.lines.filter((l) => l.includes('STALE BUILD'))).toEqual([]);
    await a.shutdown();
    // A helper module edited after the build: the ranks would run the old code.
    const later = new Date(Date.now() + 60_000);
    writeFileSync(join(root, 'src', 'helper.ts'), 'export const x = 1;\n');
    utimesSync(join(root, 'src', 'helper.ts'), later, later);
    const stale = captureLogger();
    const b = track(new DistributedRunner(mod.TsWorker, { worldSize: 1, logger: stale }));
    await b.start();
    expect(stale.lines.filter((l) => l.includes('STALE BUILD'))).toEqual([
      `warn STALE BUILD: the ranks will run ${join(root, 'dist', 'ts-worker.js')}, which is older than ${join(root, 'src', 'helper.ts')} ` +
        '(changed since the last build). The ranks run the old code while this process imports the new: run pnpm build.',
    ]);
    await b.shutdown();
    expectNothingLeft(b);
  });
});
