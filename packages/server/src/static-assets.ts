/**
 * Where the viewer's browser modules live on disk: the compiled viewer script of this package
 * and the compiled ESM of `@reactor/client` (the viewer imports it through an import map, so
 * no bundler is needed). Both are plain files produced by `pnpm build`.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ReactorError } from '@reactor/runtime';
import { ServerErrorCode } from './errors.js';

const here = dirname(fileURLToPath(import.meta.url));

/** Folder of the compiled viewer script (`dist/viewer`, built from `viewer/`), from `src/` or `dist/`. */
function viewerDir(): string {
  const sibling = join(here, 'viewer');
  if (existsSync(join(sibling, 'viewer-app.js'))) return sibling;
  // Running the TypeScript sources (tests): the compiled script is in the package's dist/.
  return resolve(here, '../dist/viewer');
}

/** Folder of a browser package's compiled ESM (`@reactor/client`, and `@reactor/protocol`, which it imports). */
function packageDist(name: '@reactor/client' | '@reactor/protocol'): string {
  const require = createRequire(import.meta.url);
  return join(dirname(require.resolve(`${name}/package.json`)), 'dist');
}

/** A browser module served by the server. */
export interface Asset {
  body: Buffer;
  contentType: string;
}

/** Thrown when a viewer file is missing because the packages were not built. */
export class ViewerNotBuiltError extends ReactorError {
  override name = 'ViewerNotBuiltError';
  constructor(message: string) {
    super(ServerErrorCode.ViewerNotBuilt, message);
  }
}

/**
 * Resolves and reads one viewer asset by URL path below `/viewer/`: `app.js` (the viewer),
 * `client/<file>.js` (the client SDK), `protocol/<file>.js` (the wire protocol it imports). Returns undefined for anything else (404).
 */
export class ViewerAssets {
  readonly #viewer = viewerDir();
  readonly #client = packageDist('@reactor/client');
  readonly #protocol = packageDist('@reactor/protocol');
  readonly #cache = new Map<string, Asset>();

  async get(rel: string): Promise<Asset | undefined> {
    const cached = this.#cache.get(rel);
    if (cached) return cached;
    let file: string | undefined;
    if (rel === 'app.js') file = join(this.#viewer, 'viewer-app.js');
    else if (/^client\/[a-z0-9-]+\.js$/.test(rel)) file = join(this.#client, rel.slice('client/'.length));
    else if (/^protocol\/[a-z0-9-]+\.js$/.test(rel)) file = join(this.#protocol, rel.slice('protocol/'.length));
    if (!file) return undefined;
    const base = rel === 'app.js' ? this.#viewer : rel.startsWith('protocol/') ? this.#protocol : this.#client;
    if (!resolve(file).startsWith(resolve(base) + sep)) return undefined;
    let body: Buffer;
    try {
      body = await readFile(file);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      if (rel === 'app.js' || !existsSync(base)) {
        throw new ViewerNotBuiltError(`viewer asset ${file} does not exist; run "pnpm build" so the viewer and @reactor/client are compiled`);
      }
      return undefined;
    }
    // Strip source-map comments: the maps are not served.
    const text = body.toString('utf8').replace(/\n\/\/# sourceMappingURL=.*$/m, '');
    const asset = { body: Buffer.from(text), contentType: 'text/javascript; charset=utf-8' };
    this.#cache.set(rel, asset);
    return asset;
  }
}
