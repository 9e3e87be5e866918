/** A test fixture (not compiled with the process fixtures in fixtures/, which import only packages). */
import { serve, type ReactorServer, type ServeOptions } from '../src/index.js';
import { quiet, useCleanups } from './fixtures/cleanups.js';
import { patternApp, type PatternAppOptions } from './fixtures/pattern-app.js';

/**
 * `start(options, app)`: a loaded server of a pattern app (32x32 unless `app` says otherwise) on
 * port 0, closed after each test (with the cleanups the caller pushes, which are also returned).
 */
export function usePatternServers(): { start(opts?: ServeOptions, app?: PatternAppOptions): Promise<ReactorServer>; cleanups: Array<() => unknown> } {
  const cleanups = useCleanups();
  async function start(opts: ServeOptions = {}, app: PatternAppOptions = {}): Promise<ReactorServer> {
    const server = await serve(patternApp({ width: 32, height: 32, ...app }), { port: 0, gracePeriodMs: 0, logger: quiet, ...opts });
    cleanups.push(() => server.close());
    await server.loaded;
    return server;
  }
  return { start, cleanups };
}
