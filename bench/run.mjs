#!/usr/bin/env node
// Runs every bench/*.bench.mjs in its own process, one after another (machines are small and
// shared: never two at once). Each prints one JSON object per line on stdout; this passes the
// lines through and fails if any bench fails. `node bench/run.mjs runner` runs only files
// whose name contains "runner".
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const filter = process.argv[2] ?? '';
const files = readdirSync(here)
  .filter((f) => f.endsWith('.bench.mjs') && f.includes(filter))
  .sort();
let failed = 0;
for (const f of files) {
  const r = spawnSync(process.execPath, ['--expose-gc', join(here, f)], { stdio: ['ignore', 'inherit', 'inherit'] });
  if (r.status !== 0) {
    failed++;
    console.error(`bench ${f} failed (exit ${r.status}, signal ${r.signal})`);
  }
}
process.exit(failed ? 1 : 0);
