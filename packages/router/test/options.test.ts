/** The router's option checks and its Kubernetes configuration loading: eager, naming the option or the file and the fix. */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { KubeConfig } from '@kubernetes/client-node';
import { silentLogger } from '@reactor/log';
import { loadKubeConfig, resolveRouterOptions, RouterError, SESSION_ID_PATTERN } from '../src/index.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function file(text: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'router-options-'));
  dirs.push(dir);
  const f = join(dir, 'kubeconfig');
  writeFileSync(f, text);
  return f;
}

const KUBECONFIG = `apiVersion: v1
kind: Config
clusters: [{ name: c, cluster: { server: "https://10.0.0.1:6443" } }]
users: [{ name: u, user: { token: t } }]
contexts: [{ name: x, context: { cluster: c, user: u, namespace: games } }]
current-context: x
`;

describe('resolveRouterOptions', () => {
  const kubeConfig = new KubeConfig();
  const base = { kubeConfig, fleet: 'reactor', logger: silentLogger };

  it('applies the defaults', () => {
    const r = resolveRouterOptions(base);
    expect(r).toMatchObject({
      namespace: 'default',
      host: '127.0.0.1',
      port: 8090,
      retryAfterS: 2,
      conflictRetries: 5,
      allowedHosts: ['localhost', '127.0.0.1', '[::1]'],
    });
  });

  it('names the option and the value it refuses', () => {
    expect(() => resolveRouterOptions({ ...base, fleet: 'Not A Name' })).toThrowErrorMatchingInlineSnapshot(
      `[RangeError: options.fleet must be a Kubernetes name (lower-case letters, digits, "-" and "."), got "Not A Name"]`,
    );
    expect(() => resolveRouterOptions({ ...base, port: 70000 })).toThrow('options.port must be an integer from 0 to 65535, got 70000');
    expect(() => resolveRouterOptions({ ...base, retryAfterS: 0 })).toThrow('options.retryAfterS must be an integer from 1 to 3600, got 0');
    expect(() => resolveRouterOptions({ ...base, publicUrl: 'ftp://x' })).toThrow(/options.publicUrl must be an http\(s\) URL/);
    expect(() => resolveRouterOptions({ ...base, kubeConfig: {} as KubeConfig })).toThrow(/options.kubeConfig must be a KubeConfig/);
  });

  it('refuses a non-loopback address without a token, unless insecure', () => {
    expect(() => resolveRouterOptions({ ...base, host: '0.0.0.0' })).toThrow(/not a loopback address, and no options.token is set/);
    expect(resolveRouterOptions({ ...base, host: '0.0.0.0', token: 't' }).allowedHosts).toBeUndefined();
    expect(resolveRouterOptions({ ...base, host: '0.0.0.0', insecure: true }).insecure).toBe(true);
  });
});

describe('loadKubeConfig', () => {
  it('reads a kubeconfig file and its context namespace', () => {
    const r = loadKubeConfig({ file: file(KUBECONFIG), env: {} });
    expect(r.namespace).toBe('games');
    expect(r.kubeConfig.getCurrentCluster()?.server).toBe('https://10.0.0.1:6443');
  });

  it('takes $KUBECONFIG when no file is given', () => {
    const f = file(KUBECONFIG);
    expect(loadKubeConfig({ env: { KUBECONFIG: f } }).source).toBe(f);
  });

  it('fails with kube_config_invalid naming what it tried', () => {
    const missing = (() => {
      try {
        loadKubeConfig({ env: { HOME: '/nonexistent-home' } });
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(missing).toBeInstanceOf(RouterError);
    expect(missing).toMatchObject({ code: 'kube_config_invalid' });
    expect((missing as Error).message).toMatchInlineSnapshot(
      `"no Kubernetes configuration: /nonexistent-home/.kube/config (no --kubeconfig, no KUBECONFIG, not in a pod) does not exist; pass --kubeconfig <file>, set KUBECONFIG, or run in a cluster"`,
    );
    expect(() => loadKubeConfig({ file: file('current-context: nowhere\n'), env: {} })).toThrow(/has no usable current context/);
    expect(() => loadKubeConfig({ file: file(': not yaml ['), env: {} })).toThrow(/cannot read the kubeconfig/);
    expect(() => loadKubeConfig({ inCluster: true, env: {} })).toThrow(/KUBERNETES_SERVICE_HOST is not set/);
  });
});

describe('SESSION_ID_PATTERN', () => {
  it('accepts label values only', () => {
    expect(SESSION_ID_PATTERN.test('0b6f6a6e-0000-4000-8000-000000000000')).toBe(true);
    for (const bad of ['', '-a', 'a-', 'a,b', 'a=b', 'a'.repeat(64)]) expect(SESSION_ID_PATTERN.test(bad), bad).toBe(false);
  });
});
