/**
 * Where the router finds the Kubernetes API: inside a cluster (its pod's service account), or a
 * kubeconfig file (`--kubeconfig`, `$KUBECONFIG`, `~/.kube/config`).
 */
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { RouterError, RouterErrorCode } from './errors.js';

/** The service account token a pod sees when it runs in a cluster. */
const SERVICE_ACCOUNT_TOKEN = '/var/run/secrets/kubernetes.io/serviceaccount/token';

/** Options of {@link loadKubeConfig}. */
export interface KubeConfigSource {
  /** A kubeconfig file. Default: `$KUBECONFIG` (its first entry), else `~/.kube/config`. */
  file?: string;
  /** Use the pod's service account (`KUBERNETES_SERVICE_HOST` and its token). Default: when no file is given or found and the process runs in a pod. */
  inCluster?: boolean;
  /** The environment to read (`KUBECONFIG`, `KUBERNETES_SERVICE_HOST`, `HOME`); default `process.env`. */
  env?: Record<string, string | undefined>;
}

/** A loaded configuration and the namespace its context names (if any). */
export interface LoadedKubeConfig {
  kubeConfig: KubeConfig;
  /** The current context's namespace (in a cluster: the pod's own). */
  namespace: string | undefined;
  /** Where it came from, for the start-up log line: a file path or `in-cluster`. */
  source: string;
}

/**
 * Loads the Kubernetes configuration the router talks to the API with.
 * @throws {RouterError} `kube_config_invalid` when the named file is missing or does not parse,
 *   or no configuration is found at all (the message lists what was tried).
 * @example
 * const { kubeConfig, namespace } = loadKubeConfig({ file: '/etc/reactor/kubeconfig' });
 */
export function loadKubeConfig(source: KubeConfigSource = {}): LoadedKubeConfig {
  const env = source.env ?? process.env;
  const kc = new KubeConfig();
  const inPod = Boolean(env['KUBERNETES_SERVICE_HOST']) && existsSync(SERVICE_ACCOUNT_TOKEN);
  if (source.inCluster || (source.file === undefined && !env['KUBECONFIG'] && inPod)) {
    if (!env['KUBERNETES_SERVICE_HOST']) {
      throw new RouterError(
        RouterErrorCode.KubeConfigInvalid,
        'in-cluster configuration asked for, but KUBERNETES_SERVICE_HOST is not set: run the router in a pod, or pass --kubeconfig <file>',
      );
    }
    try {
      kc.loadFromCluster();
    } catch (err) {
      throw new RouterError(RouterErrorCode.KubeConfigInvalid, `cannot load the in-cluster configuration: ${(err as Error).message}`, { cause: err });
    }
    return { kubeConfig: kc, namespace: kc.getContextObject(kc.getCurrentContext())?.namespace?.trim() || undefined, source: 'in-cluster' };
  }
  const fromEnv = env['KUBECONFIG']?.split(':').find((f) => f !== '');
  const home = env['HOME'] ?? homedir();
  const file = source.file ?? fromEnv ?? join(home, '.kube', 'config');
  if (!existsSync(file)) {
    const tried =
      source.file !== undefined
        ? `--kubeconfig ${file}`
        : fromEnv !== undefined
          ? `KUBECONFIG=${file}`
          : `${file} (no --kubeconfig, no KUBECONFIG, not in a pod)`;
    throw new RouterError(
      RouterErrorCode.KubeConfigInvalid,
      `no Kubernetes configuration: ${tried} does not exist; pass --kubeconfig <file>, set KUBECONFIG, or run in a cluster`,
    );
  }
  try {
    kc.loadFromString(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new RouterError(RouterErrorCode.KubeConfigInvalid, `cannot read the kubeconfig ${file}: ${(err as Error).message}`, { cause: err });
  }
  const context = kc.getContextObject(kc.getCurrentContext());
  if (!context || !kc.getCurrentCluster()) {
    throw new RouterError(
      RouterErrorCode.KubeConfigInvalid,
      `the kubeconfig ${file} has no usable current context (current-context: ${JSON.stringify(kc.getCurrentContext())}); set current-context to one of its contexts`,
    );
  }
  return { kubeConfig: kc, namespace: context.namespace || undefined, source: file };
}
