#!/usr/bin/env node
// `pnpm reactor ...`: this checkout's `reactor` command. On a fresh clone nothing is compiled
// yet (dist/ is not committed), so the workspace is built once first; after that it starts at
// once, and `reactor run` itself refuses an app whose dist/ is older than its sources.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const main = new URL('../packages/cli/dist/main.js', import.meta.url);
if (!existsSync(fileURLToPath(main))) {
  process.stderr.write('reactor: this workspace is not built yet; running "pnpm build" first\n');
  const built = spawnSync('pnpm', ['-s', 'build'], { cwd: fileURLToPath(new URL('..', import.meta.url)), stdio: ['ignore', 2, 2] });
  if (built.status !== 0) {
    process.stderr.write(`reactor: "pnpm build" failed (exit ${built.status ?? built.signal}); fix the errors above and run it again\n`);
    process.exit(1);
  }
}
await import(main.href);
