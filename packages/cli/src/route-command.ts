/**
 * `reactor route`: the stateless session router in front of a fleet of `reactor run` instances
 * on Kubernetes with Agones (see docs/scale-out.md).
 */
import type { Logger } from '@reactor/log';
import { loadKubeConfig, route } from '@reactor/router';
import { ReactorError } from '@reactor/runtime';
import { installShutdownHandlers, isLoopbackHost } from '@reactor/server';
import { listFlag, parsePort } from './commands.js';
import { CliErrorCode } from './errors.js';
import { hostProblem, originProblem } from './exposure.js';
import { existsSync, readFileSync } from 'node:fs';
import type { SigningKey } from '@reactor/server';
import { AUTH_ENV } from './token-command.js';

/** A PEM key given as its text or as a file path. */
function readPem(value: string): string {
  if (value.trimStart().startsWith('-----BEGIN')) return value;
  if (!existsSync(value))
    throw new ReactorError(CliErrorCode.AuthInvalid, `${AUTH_ENV.privateKey}: ${value} does not exist; give the PEM file of the Ed25519 key`);
  return readFileSync(value, 'utf8');
}

/** The flags of `reactor route`, as the bin parses them. */
export interface RouteOptions {
  kubeconfig?: string;
  inCluster?: boolean;
  namespace?: string;
  fleet?: string;
  host?: string;
  port?: string | number;
  token?: string;
  allowedHost?: unknown;
  allowedOrigin?: unknown;
  insecure?: boolean;
  publicUrl?: string;
  retryAfter?: string | number;
  /** `--api-key` (also `REACTOR_ROUTER_API_KEY`): what your backend presents on POST /sessions. */
  apiKey?: string;
  /** `--queue-max-wait`: the longest `?wait=` a request may ask, seconds. */
  queueMaxWait?: string | number;
  /** `--queue-max-length`: most requests waiting at once. */
  queueMaxLength?: string | number;
  /** `--instance-token-ttl`: lifetime of the instance tokens, seconds. */
  instanceTokenTtl?: string | number;
  /** `--no-move` sets it false: a draining instance keeps its session to the drain deadline. */
  move?: boolean;
}

function positiveInt(v: string | number | undefined, flag: string, fallback: number): number {
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1 || n > 3600)
    throw new ReactorError(CliErrorCode.CliUsage, `${flag} must be a whole number of seconds from 1 to 3600, got ${JSON.stringify(v)}`);
  return n;
}

/** `reactor route`: loads the Kubernetes configuration, serves the router, prints `Router: <url>`. */
export async function routeCommand(o: RouteOptions, logger: Logger, env: Record<string, string | undefined> = process.env): Promise<void> {
  const token = o.token ?? (env['REACTOR_TOKEN'] || undefined);
  const host = o.host ?? env['REACTOR_ROUTER_HOST'] ?? '127.0.0.1';
  const port = parsePort(o.port ?? env['REACTOR_ROUTER_PORT'], 8090);
  const fleet = o.fleet ?? env['REACTOR_FLEET'] ?? 'reactor';
  const allowedHosts = listFlag(o.allowedHost, '--allowed-host', hostProblem);
  const allowedOrigins = listFlag(o.allowedOrigin, '--allowed-origin', originProblem);
  const apiKey = o.apiKey ?? (env['REACTOR_ROUTER_API_KEY'] || undefined);
  // The instance tokens are signed with the instances' key (they check them with the same secret or the public key).
  const privateKey = env[AUTH_ENV.privateKey] || undefined;
  const secret = env[AUTH_ENV.secret] || undefined;
  const tokenKey: SigningKey | undefined = privateKey !== undefined ? { privateKey: readPem(privateKey) } : secret !== undefined ? { secret } : undefined;
  const exposed = !isLoopbackHost(host) && token === undefined && apiKey === undefined;
  if (exposed && o.insecure !== true) {
    throw new ReactorError(
      CliErrorCode.InsecureBind,
      `refusing to route on ${host} without an access token: anyone who can reach it could allocate every instance. ` +
        'Set a token (--token <secret> or REACTOR_TOKEN; give the instances the same one), bind a loopback address (--host 127.0.0.1), ' +
        'or pass --insecure if every machine on this network is trusted',
    );
  }
  const kube = loadKubeConfig({ ...(o.kubeconfig !== undefined && { file: o.kubeconfig }), ...(o.inCluster === true && { inCluster: true }), env });
  const namespace = o.namespace ?? env['REACTOR_NAMESPACE'] ?? kube.namespace ?? 'default';
  logger.info(`Kubernetes API from ${kube.source}; fleet "${fleet}" in namespace "${namespace}"`);
  if (exposed) logger.warn(`--insecure: routing on ${host} without a token; anyone who can reach it can allocate instances`);
  let router;
  try {
    router = await route({
      kubeConfig: kube.kubeConfig,
      namespace,
      fleet,
      host,
      port,
      logger,
      retryAfterS: positiveInt(o.retryAfter, '--retry-after', 2),
      ...(token !== undefined && { token }),
      ...(o.insecure === true && { insecure: true }),
      ...(allowedHosts !== undefined && { allowedHosts }),
      ...(allowedOrigins !== undefined && { allowedOrigins }),
      ...(o.publicUrl !== undefined && { publicUrl: o.publicUrl }),
      ...(apiKey !== undefined && { apiKey }),
      ...(tokenKey !== undefined && { tokenKey }),
      ...(o.queueMaxWait !== undefined && { queueMaxWaitS: positiveInt(o.queueMaxWait, '--queue-max-wait', 120) }),
      ...(o.queueMaxLength !== undefined && { queueMaxLength: Number(o.queueMaxLength) }),
      ...(o.instanceTokenTtl !== undefined && { instanceTokenTtlS: Number(o.instanceTokenTtl) }),
      ...(o.move === false && { moveOnDrain: false }),
    });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE' || code === 'EACCES') {
      throw new ReactorError(CliErrorCode.PortUnavailable, `cannot listen on ${host}:${port} (${code}); pass --port <other> (0 picks a free one)`, {
        cause: err,
      });
    }
    if (err instanceof RangeError || err instanceof TypeError)
      throw new ReactorError(CliErrorCode.CliUsage, err.message.replace(/^options\./, ''), { cause: err });
    throw err;
  }
  installShutdownHandlers(router, { logger, onSignal: (s) => logger.info(`${s}: closing the router`) });
  process.stdout.write(`Router: ${router.url}\n`);
}
