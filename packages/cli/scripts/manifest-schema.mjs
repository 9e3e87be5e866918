#!/usr/bin/env node
// Writes packages/cli/reactor.schema.json from the manifest's one declaration
// (src/manifest-sections.ts, built to dist/): `pnpm --filter @reactor/cli build && node packages/cli/scripts/manifest-schema.mjs`.
// test/manifest-schema.test.ts fails while the committed file differs from what this writes.
import { writeFileSync } from 'node:fs';
import { manifestJsonSchemaText, MANIFEST_SCHEMA_FILE } from '../dist/manifest-schema.js';

const file = new URL(`../${MANIFEST_SCHEMA_FILE}`, import.meta.url);
writeFileSync(file, manifestJsonSchemaText());
console.log(`wrote ${file.pathname}`);
