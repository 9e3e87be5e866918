/**
 * The JSON Schema of `reactor.yaml`, generated from its one declaration (the section classes of
 * `manifest-sections.ts`, through class-validator-jsonschema): published as
 * `@reactor/cli/reactor.schema.json` for editors (`# yaml-language-server: $schema=...`).
 * `node packages/cli/scripts/manifest-schema.mjs` writes the file; a test keeps it equal to this.
 */
import { createRequire } from 'node:module';
import { validationMetadatasToSchemas } from 'class-validator-jsonschema';
import { MANIFEST_SECTIONS } from './manifest-sections.js';

type TransformerStorage = NonNullable<NonNullable<Parameters<typeof validationMetadatasToSchemas>[0]>['classTransformerMetadataStorage']>;

/** Where the schema is published in `@reactor/cli`. */
export const MANIFEST_SCHEMA_FILE = 'reactor.schema.json';

type JsonSchema = Record<string, unknown> & { properties?: Record<string, JsonSchema>; additionalProperties?: boolean };

/** class-transformer's `@Type()` metadata (for the `$ref` of each nested section). */
function transformerStorage(): TransformerStorage {
  const require = createRequire(import.meta.url);
  return (require('class-transformer/cjs/storage') as { defaultMetadataStorage: TransformerStorage }).defaultMetadataStorage;
}

/**
 * The schema: `ManifestDocument` at the root, every other section a definition named after its
 * class; no section allows a key it does not declare (as `loadManifest()` refuses one).
 */
export function manifestJsonSchema(): Record<string, unknown> {
  const all = validationMetadatasToSchemas({ classTransformerMetadataStorage: transformerStorage(), refPointerPrefix: '#/definitions/' }) as Record<
    string,
    JsonSchema
  >;
  const definitions: Record<string, JsonSchema> = {};
  for (const section of MANIFEST_SECTIONS) {
    const schema = all[section.name];
    if (!schema) throw new Error(`no schema was generated for ${section.name}`);
    definitions[section.name] = { ...schema, additionalProperties: false };
  }
  const { ManifestDocument: root, ...rest } = definitions;
  return {
    $schema: 'http://json-schema.org/draft-07/schema#',
    title: 'reactor.yaml',
    description: 'The manifest `reactor run` serves (see the README, "Write your own app"). Generated from packages/cli/src/manifest-sections.ts: do not edit.',
    ...root,
    definitions: rest,
  };
}

/** The schema as the published file holds it. */
export function manifestJsonSchemaText(): string {
  return `${JSON.stringify(manifestJsonSchema(), null, 2)}\n`;
}
