/**
 * Where the viewer's browser modules are on disk, for the server that serves them: this
 * package's compiled viewer (`dist/browser/`, served as `/viewer/<module>.js`; the page loads
 * `app.js`, which imports the others relative to itself) and the compiled ESM of
 * `@reactor/client` it imports (served as `/viewer/client/<file>.js`, through the page's import
 * map), and the compiled ESM of `@reactor/protocol` the client imports. All are plain files
 * produced by `pnpm build`; no bundler.
 */
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The module the viewer page loads (`/viewer/app.js`). */
export const VIEWER_ENTRY = 'app.js';

/**
 * Folder of the compiled viewer modules (`dist/browser`, built from `src/browser/`): the same
 * path from `src/` (tests run the TypeScript sources) and from `dist/`.
 */
export function viewerModulesDir(): string {
  return join(fileURLToPath(new URL('.', import.meta.url)), '..', 'dist', 'browser');
}

/** Folder of `@reactor/client`'s compiled ESM, as this package resolves it (the viewer imports it). */
export function clientModulesDir(): string {
  const require = createRequire(import.meta.url);
  return join(dirname(require.resolve('@reactor/client/package.json')), 'dist');
}

/**
 * Folder of `@reactor/protocol`'s compiled ESM (served as `/viewer/protocol/<file>.js`): the
 * client's compiled files import it (a dependency of this package, resolved, not imported).
 */
export function protocolModulesDir(): string {
  const require = createRequire(import.meta.url);
  return join(dirname(require.resolve('@reactor/protocol/package.json')), 'dist');
}

/**
 * Folder of uPlot's built files (`uPlot.esm.js`, `uPlot.min.css`), which the dashboard page
 * loads (served as `/viewer/uplot/<file>`): a dependency of this package, resolved, not imported.
 */
export function uplotModulesDir(): string {
  const require = createRequire(import.meta.url);
  return join(dirname(require.resolve('uplot/package.json')), 'dist');
}
