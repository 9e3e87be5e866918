/**
 * Where the viewer's browser modules live on disk: the compiled viewer of `@reactor/viewer`
 * (`app.js` and the modules it imports) and the compiled ESM of `@reactor/client` and `@reactor/protocol` (the viewer
 * imports it through an import map, so no bundler is needed). Both folders come from
 * `@reactor/viewer`; both are plain files produced by `pnpm build`.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join, resolve, sep } from 'node:path';
import { ReactorError } from '@reactor/runtime';
import { VIEWER_ENTRY, clientModulesDir, protocolModulesDir, uplotModulesDir, viewerModulesDir } from '@reactor/viewer';
import { ServerErrorCode } from '../base/errors.js';

/** A browser module served by the server. */
export interface Asset {
  body: Buffer;
  contentType: string;
}

/** Thrown when a viewer file is missing because the packages were not built. */
export class ViewerNotBuiltError extends ReactorError {
  constructor(message: string) {
    super(ServerErrorCode.ViewerNotBuilt, message);
  }
}

/**
 * Resolves and reads one viewer asset by URL path below `/viewer/`: `app.js` (the viewer) and
 * `<module>.js` (the viewer's other modules, which `app.js` imports relative to itself),
 * `client/<file>.js` and `client/<folder>/<file>.js` (the client SDK and its folders), `protocol/<file>.js` (the wire protocol the SDK imports),
 * `uplot/uPlot.esm.js` and `uplot/uPlot.min.css` (the dashboard's chart library).
 * Returns undefined for anything else (404).
 */
export class ViewerAssets {
  readonly #viewer = viewerModulesDir();
  readonly #client = clientModulesDir();
  readonly #protocol = protocolModulesDir();
  readonly #uplot = uplotModulesDir();
  readonly #cache = new Map<string, Asset>();

  async get(rel: string): Promise<Asset | undefined> {
    const cached = this.#cache.get(rel);
    if (cached) return cached;
    if (rel === 'uplot/uPlot.esm.js' || rel === 'uplot/uPlot.min.css') {
      const asset = {
        body: await readFile(join(this.#uplot, rel.slice('uplot/'.length))),
        contentType: rel.endsWith('.css') ? 'text/css; charset=utf-8' : 'text/javascript; charset=utf-8',
      };
      this.#cache.set(rel, asset);
      return asset;
    }
    const ownModule = /^[a-z0-9-]+\.js$/.test(rel);
    const base = ownModule
      ? this.#viewer
      : /^client\/(?:[a-z0-9-]+\/)?[a-z0-9-]+\.js$/.test(rel)
        ? this.#client
        : /^protocol\/[a-z0-9-]+\.js$/.test(rel)
          ? this.#protocol
          : undefined;
    if (!base) return undefined;
    const file = join(base, ownModule ? rel : rel.slice(rel.indexOf('/') + 1));
    if (!resolve(file).startsWith(resolve(base) + sep)) return undefined;
    let body: Buffer;
    try {
      body = await readFile(file);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      if (rel === VIEWER_ENTRY || !existsSync(base)) {
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
