/**
 * `reactor deploy values`: the Helm values (deploy/helm/reactor) that come from `reactor.yaml`,
 * printed as YAML for `helm install -f`. docs/scale-out.md lists the mapping.
 */
import { existsSync } from 'node:fs';
import { dirname, relative, resolve, sep } from 'node:path';
import { posix } from 'node:path';
import { Document } from 'yaml';
import type { Logger } from '@reactor/log';
import { ReactorError } from '@reactor/runtime';
import { describeApp } from '@reactor/runtime/internal';
import { importApp, manifestFrom } from './commands.js';
import { CliErrorCode } from './errors.js';
import type { Manifest } from './manifest.js';

/** Where the image built by deploy/docker/Dockerfile unpacks the bundle. */
export const IMAGE_ROOT = '/opt/reactor';
/** The port an instance listens on when `server.port` is absent or 0 (a pod needs a fixed one), or 8080. */
export const DEFAULT_POD_PORT = 8000;
/** The Agones SDK sidecar's health port in every GameServer pod (its `--health-port`; the controller's probes hard-code it): never the instance's. */
export const AGONES_SIDECAR_HEALTH_PORT = 8080;

/** Flags of `reactor deploy values`. */
export interface DeployOptions {
  manifest?: string;
  /** Where the bundle lies inside the image (default {@link IMAGE_ROOT}). */
  imageRoot?: string;
}

/** The chart values a manifest determines (the keys of deploy/helm/reactor/values.yaml). */
export interface ManifestChartValues {
  app: { name: string; manifest: string; port: number };
  gpu: { count: number; type?: string };
  auth?: { allowedOrigins: string[] };
  /** From `runtime.session_grace_ms` (whole seconds, rounded up), with a termination grace at least 30 s longer. */
  sessionGraceSeconds?: number;
  terminationGracePeriodSeconds?: number;
}

/** The chart's default `terminationGracePeriodSeconds`, and the margin above the session grace for the rest of the drain, s. */
const CHART_TERMINATION_GRACE_S = 90;
const DRAIN_MARGIN_S = 30;

/** The folder the bundle is made from: the nearest parent holding `pnpm-workspace.yaml`, else the manifest's folder. */
function workspaceRoot(from: string): string {
  let dir = from;
  for (;;) {
    if (existsSync(resolve(dir, 'pnpm-workspace.yaml'))) return dir;
    const up = dirname(dir);
    if (up === dir) return from;
    dir = up;
  }
}

/**
 * The chart values of a manifest. `appName` is the app's own name, used when the manifest has
 * no `model.name`.
 */
export function chartValues(m: Manifest, appName: string, imageRoot = IMAGE_ROOT): ManifestChartValues {
  const inBundle = relative(workspaceRoot(m.root), m.file).split(sep).join('/');
  const port = m.server.port === undefined || m.server.port === 0 || m.server.port === AGONES_SIDECAR_HEALTH_PORT ? DEFAULT_POD_PORT : m.server.port;
  return {
    app: { name: m.model.name ?? appName, manifest: posix.join(imageRoot, inBundle), port },
    gpu: { count: m.model.gpu.count, ...(m.model.gpu.type !== undefined && { type: m.model.gpu.type }) },
    ...(m.server.allowedOrigins !== undefined && { auth: { allowedOrigins: m.server.allowedOrigins } }),
    ...(m.runtime.sessionGraceMs !== undefined && graceValues(Math.ceil(m.runtime.sessionGraceMs / 1000))),
  };
}

function graceValues(sessionGraceSeconds: number): { sessionGraceSeconds: number; terminationGracePeriodSeconds: number } {
  return { sessionGraceSeconds, terminationGracePeriodSeconds: Math.max(CHART_TERMINATION_GRACE_S, sessionGraceSeconds + DRAIN_MARGIN_S) };
}

/**
 * `reactor deploy values`: prints the values YAML on stdout.
 * @throws ReactorError `cli_usage` for another target than `values`; `manifest_invalid`, `app_import_failed` as `reactor schema`.
 */
export async function deployCommand(what: string | undefined, o: DeployOptions, logger: Logger): Promise<void> {
  if (what !== 'values') {
    throw new ReactorError(
      CliErrorCode.CliUsage,
      `${what === undefined ? 'reactor deploy needs a target' : `unknown deploy target "${what}"`}; the one target is "values": reactor deploy values [--manifest reactor.yaml] > values.reactor.yaml, then helm install -f values.reactor.yaml`,
    );
  }
  if (o.imageRoot !== undefined && !o.imageRoot.startsWith('/')) {
    throw new ReactorError(CliErrorCode.CliUsage, `--image-root must be an absolute path inside the image, got ${JSON.stringify(o.imageRoot)}`);
  }
  const m = manifestFrom(o);
  const name = m.model.name ?? describeApp(await importApp(m, { logger })).schema.app.name;
  const values = chartValues(m, name, o.imageRoot ?? IMAGE_ROOT);
  if (m.server.token !== undefined) {
    logger.warn(
      `${m.file} sets server.token: it would be baked into the image; give the chart auth.existingSecret instead (REACTOR_TOKEN from the Secret wins over server.token)`,
    );
  }
  if (m.server.port === 0) logger.warn(`server.port is 0 in ${m.file}; a pod needs a fixed port: app.port is ${DEFAULT_POD_PORT}`);
  if (m.server.port === AGONES_SIDECAR_HEALTH_PORT) {
    logger.warn(
      `server.port is ${AGONES_SIDECAR_HEALTH_PORT} in ${m.file}: in a GameServer pod that is the Agones SDK sidecar's health port (the two would clash); app.port is ${DEFAULT_POD_PORT}`,
    );
  }
  const doc = new Document(values);
  doc.commentBefore = ` Helm values from ${m.file} (reactor deploy values).\n Use: helm install <release> deploy/helm/reactor -f <this file> --set auth.existingSecret=<secret>`;
  process.stdout.write(doc.toString());
}
