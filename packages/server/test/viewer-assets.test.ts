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

  it("serves the client SDK's modules in its folders, each import of the entry reached (rtc/, video/, media/, latency/)", async () => {
    const server = await start();
    const seen = new Set<string>();
    const queue = ['index.js', 'browser.js'];
    while (queue.length > 0) {
      const name = queue.shift()!;
      if (seen.has(name)) continue;
      seen.add(name);
      const res = await fetch(`${server.url}/viewer/client/${name}`);
      expect(res.status, name).toBe(200);
      const js = await res.text();
      // Imports relative to the module, resolved as the browser does.
      for (const m of js.matchAll(/\b(?:from|import)\s*\(?\s*['"](\.{1,2}\/[^'"]+)['"]/g)) {
        const url = new URL(m[1]!, `http://x/${name}`).pathname.slice(1);
        queue.push(url);
      }
    }
    for (const folder of ['rtc/', 'video/', 'media/', 'latency/'])
      expect(
        [...seen].some((n) => n.startsWith(folder)),
        folder,
      ).toBe(true);
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
      '/viewer/client/media/nope.js',
      '/viewer/client/media/deeper/media-capture.js',
      '/viewer/client/%2e%2e/%2e%2e/package.json',
    ]) {
      const res = await fetch(`${server.url}${path}`);
      expect(res.status, path).toBe(404);
      expect(((await res.json()) as { error: { code: string } }).error.code, path).toBe('not_found');
    }
  });
});
