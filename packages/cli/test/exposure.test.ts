import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { onTestFinished, describe, expect, it } from 'vitest';
import { flagList, hostProblem, originProblem } from '../src/exposure.js';
import { loadManifest, type ManifestError } from '../src/manifest.js';

describe('allowed hosts and origins', () => {
  it('accepts host names, IP addresses and *; refuses a scheme or a port, saying what a valid one looks like', () => {
    for (const ok of ['reactor.example.com', 'localhost', '10.0.0.5', '[::1]', '*', 'Proxy.Example']) expect(hostProblem(ok)).toBeUndefined();
    expect(hostProblem('https://x.example')).toBe(
      '"https://x.example" is not a host name: give the name alone, without scheme or port (e.g. reactor.example.com, 10.0.0.5, [::1]), or * for any',
    );
    expect(hostProblem('x.example:8080')).toBeDefined();
    expect(hostProblem('')).toBeDefined();
  });

  it('accepts http(s) origins with an optional port and *; refuses a path, another scheme or a bare name', () => {
    for (const ok of ['https://app.example.com', 'http://localhost:5173', 'https://app.example.com/', '*', 'HTTPS://App.Example.com'])
      expect(originProblem(ok)).toBeUndefined();
    for (const bad of ['app.example.com', 'https://app.example.com/page', 'ftp://x.example', 'https://'])
      expect(originProblem(bad)).toMatch(/is not an origin: give scheme, host and optional port/);
  });

  it('splits repeated and comma-separated flag values', () => {
    expect(flagList(undefined)).toBeUndefined();
    expect(flagList('a.example')).toEqual(['a.example']);
    expect(flagList(['a.example,b.example', ' c.example ', ''])).toEqual(['a.example', 'b.example', 'c.example']);
  });

  it('reads server.allowed_hosts / allowed_origins from reactor.yaml, naming each bad entry by key and index', () => {
    const dir = mkdtempSync(join(tmpdir(), 'reactor-exposure-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'reactor.yaml');
    const base = 'model: { name: x, version: 1.0.0 }\nruntime: { import: app.js:App }\n';
    writeFileSync(file, `${base}server: { allowed_hosts: [proxy.example], allowed_origins: ['https://app.example'] }\n`);
    expect(loadManifest(file).server).toEqual({ allowedHosts: ['proxy.example'], allowedOrigins: ['https://app.example'] });
    writeFileSync(file, `${base}server: { allowed_hosts: [ok.example, 'proxy.example:443'], allowed_origins: [app.example], }\n`);
    let err: ManifestError | undefined;
    try {
      loadManifest(file);
    } catch (e) {
      err = e as ManifestError;
    }
    expect(err?.problems).toEqual([
      'server.allowed_hosts[1]: "proxy.example:443" is not a host name: give the name alone, without scheme or port (e.g. reactor.example.com, 10.0.0.5, [::1]), or * for any',
      'server.allowed_origins[0]: "app.example" is not an origin: give scheme, host and optional port, without a path (e.g. https://app.example.com, http://localhost:5173), or * for any',
    ]);
    writeFileSync(file, `${base}server: { allowed_hosts: proxy.example }\n`);
    expect(() => loadManifest(file)).toThrow('server.allowed_hosts: must be an array');
  });
});
