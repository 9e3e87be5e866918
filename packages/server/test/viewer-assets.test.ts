import { describe, expect, it } from 'vitest';
import { usePatternServers } from './pattern-servers.js';

const { start } = usePatternServers();

/** The relative modules a served script imports (`from './x.js'`). */
function relativeImports(js: string): string[] {
  return [...js.matchAll(/\bfrom\s*['"]\.\/([^'"]+)['"]/g)].map((m) => m[1]!);
}

describe('server: the viewer modules of @reactor/viewer', () => {
  it('serves /viewer/app.js and every module it imports, beside it, under the access check', async () => {
    const server = await start({ token: 'tok' });
    const auth = { authorization: 'Bearer tok' };
    const seen = new Set<string>();
    const queue = ['app.js'];
    while (queue.length > 0) {
      const name = queue.shift()!;
      if (seen.has(name)) continue;
      seen.add(name);
      expect((await fetch(`${server.url}/viewer/${name}`)).status, name).toBe(401);
      const res = await fetch(`${server.url}/viewer/${name}`, { headers: auth });
      expect(res.status, name).toBe(200);
      expect(res.headers.get('content-type'), name).toBe('text/javascript; charset=utf-8');
      expect(res.headers.get('cache-control'), name).toBe('no-cache');
      const js = await res.text();
      expect(js, name).not.toContain('sourceMappingURL');
      queue.push(...relativeImports(js));
    }
    // The split parts are all reached from the entry.
    expect([...seen].sort()).toEqual([
      'app.js',
      'canvas.js',
      'clips.js',
      'dom.js',
      'fork.js',
      'form.js',
      'hooks.js',
      'keys.js',
      'latency.js',
      'loading.js',
      'media.js',
      'rewind.js',
      'transport.js',
    ]);
  });

  it('answers 404 for a module the viewer does not have, and never serves its Node entry or a path outside its folder', async () => {
    const server = await start();
    for (const path of [
      '/viewer/nope.js',
      '/viewer/index.js',
      '/viewer/app.js.map',
      '/viewer/../package.json',
      '/viewer/%2e%2e/package.json',
      '/viewer/client/nope.js',
    ]) {
      const res = await fetch(`${server.url}${path}`);
      expect(res.status, path).toBe(404);
      expect(((await res.json()) as { error: { code: string } }).error.code, path).toBe('not_found');
    }
  });
});
