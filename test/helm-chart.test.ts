/**
 * The Helm chart (deploy/helm/reactor), offline, with the real helm 3.17.3 binary (extracted
 * from an npm package by scripts/ensure-helm.sh): `helm lint`, `helm template` of the Agones and
 * the plain variants and a few value combinations, bad values refused with a clear message, and
 * every rendered object validated against schemas kept as data:
 * - core Kubernetes objects (Deployment, StatefulSet, Service, Secret, ServiceAccount, Role,
 *   RoleBinding, and the Fleet's pod template) with kubernetes-models' validators, built from the
 *   Kubernetes OpenAPI schemas (types, required fields, formats; like the API server's OpenAPI,
 *   they do not refuse unknown fields, so the fields that matter are also asserted one by one);
 * - the Agones Fleet / FleetAutoscaler and the Prometheus Operator ServiceMonitor with the JSON
 *   schemas in deploy/schemas/, written from their API references for the fields the chart uses
 *   (not the upstream CRDs; they refuse unknown fields).
 * Not exercised here: a real cluster's admission (Agones' webhooks, the CRDs' own validation,
 * RBAC evaluation, scheduling of GPU pods).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Ajv, type ValidateFunction } from 'ajv';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { StatefulSet } from 'kubernetes-models/apps/v1/StatefulSet';
import { Role } from 'kubernetes-models/rbac.authorization.k8s.io/v1/Role';
import { RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1/RoleBinding';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { Ingress } from 'kubernetes-models/networking.k8s.io/v1/Ingress';
import { PodTemplateSpec } from 'kubernetes-models/v1/PodTemplateSpec';
import { RouterMetrics } from '@reactor/router';
import { FakeAgonesCluster } from './fixtures/agones/cluster.js';
import { Secret } from 'kubernetes-models/v1/Secret';
import { Service } from 'kubernetes-models/v1/Service';
import { ServiceAccount } from 'kubernetes-models/v1/ServiceAccount';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const chart = join(repo, 'deploy/helm/reactor');
const TOKEN = 'test-token-0123456789abcdef';
const cli = join(repo, 'packages/cli/dist/main.js');

type K8sObject = { apiVersion: string; kind: string; metadata: { name: string; labels?: Record<string, string> }; spec?: any; [k: string]: unknown };
type Container = { name: string; args: string[]; env: Array<{ name: string; value?: string; valueFrom?: any }>; resources: any; [k: string]: any };

/** The core kinds the chart renders, each with kubernetes-models' validating class. */
const CORE: Record<string, new (data: any) => { validate(): void }> = {
  'apps/v1 Deployment': Deployment,
  'apps/v1 StatefulSet': StatefulSet,
  'v1 Service': Service,
  'v1 Secret': Secret,
  'v1 ServiceAccount': ServiceAccount,
  'rbac.authorization.k8s.io/v1 Role': Role,
  'rbac.authorization.k8s.io/v1 RoleBinding': RoleBinding,
  'v1 ConfigMap': ConfigMap,
  'networking.k8s.io/v1 Ingress': Ingress,
};
const CRD_SCHEMAS: Record<string, string> = {
  'monitoring.coreos.com/v1 PrometheusRule': 'monitoring.coreos.com_v1_PrometheusRule.schema.json',
  'agones.dev/v1 Fleet': 'agones.dev_v1_Fleet.schema.json',
  'autoscaling.agones.dev/v1 FleetAutoscaler': 'autoscaling.agones.dev_v1_FleetAutoscaler.schema.json',
  'monitoring.coreos.com/v1 ServiceMonitor': 'monitoring.coreos.com_v1_ServiceMonitor.schema.json',
};
const crdValidators = new Map<string, ValidateFunction>();

let helm = '';
beforeAll(() => {
  helm = execFileSync('bash', [join(repo, 'scripts/ensure-helm.sh')], { encoding: 'utf8' }).trim();
  const ajv = new Ajv({ allErrors: true, strict: true });
  for (const [key, file] of Object.entries(CRD_SCHEMAS)) {
    crdValidators.set(key, ajv.compile(JSON.parse(readFileSync(join(repo, 'deploy/schemas', file), 'utf8')) as object));
  }
}, 120_000);

function runHelm(args: string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(helm, args, {
    encoding: 'utf8',
    env: {
      ...process.env,
      HELM_CACHE_HOME: join(repo, '.tools/helm-home'),
      HELM_CONFIG_HOME: join(repo, '.tools/helm-home'),
      HELM_DATA_HOME: join(repo, '.tools/helm-home'),
    },
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

function setArgs(values: Record<string, string | number | boolean>): string[] {
  return Object.entries(values).flatMap(([k, v]) => [typeof v === 'string' ? '--set-string' : '--set', `${k}=${v}`]);
}

/** `helm template` -> the rendered objects (duplicate keys refused), or throws with helm's stderr. */
function render(values: Record<string, string | number | boolean> = {}, files: string[] = []): K8sObject[] {
  const r = runHelm([
    'template',
    'rx',
    chart,
    '--namespace',
    'games',
    ...files.flatMap((f) => ['-f', f.startsWith('/') ? f : join(chart, f)]),
    ...setArgs(values),
  ]);
  if (r.status !== 0) throw new Error(`helm template failed (${r.status}): ${r.stderr}`);
  const docs = parseAllDocuments(r.stdout, { uniqueKeys: true });
  const objects: K8sObject[] = [];
  for (const doc of docs) {
    if (doc.errors.length > 0) throw new Error(`rendered YAML is invalid: ${doc.errors.map((e) => e.message).join('; ')}`);
    const obj = doc.toJS() as K8sObject | null;
    if (obj) objects.push(obj);
  }
  return objects;
}

/** The problems of one object against its schema (empty: valid); an unknown kind is a problem. */
function problems(obj: K8sObject): string[] {
  const key = `${obj.apiVersion} ${obj.kind}`;
  const name = obj.metadata.name;
  const Core = CORE[key];
  if (Core) {
    try {
      new Core(obj).validate();
      return [];
    } catch (err) {
      return [`${key} ${obj.metadata.name}: ${(err as Error).message}`];
    }
  }
  const validate = crdValidators.get(key);
  if (!validate) return [`${key} ${name}: no schema for this kind (add one to deploy/schemas and this test)`];
  const valid = validate(obj);
  const out = valid ? [] : (validate.errors ?? []).map((e) => `${key} ${name}: ${e.instancePath} ${e.message} ${JSON.stringify(e.params)}`);
  if (key === 'agones.dev/v1 Fleet') {
    try {
      new PodTemplateSpec((obj.spec as any).template.spec.template).validate();
    } catch (err) {
      out.push(`Fleet ${name} pod template: ${(err as Error).message}`);
    }
  }
  return out;
}

const kinds = (objs: K8sObject[]) => objs.map((o) => `${o.kind}/${o.metadata.name}`).sort();
const find = (objs: K8sObject[], kind: string, name?: string): K8sObject => {
  const o = objs.find((x) => x.kind === kind && (name === undefined || x.metadata.name === name));
  if (!o) throw new Error(`no ${kind}${name ? ` ${name}` : ''} in ${kinds(objs).join(', ')}`);
  return o;
};
const instanceContainer = (objs: K8sObject[]): Container => {
  const fleet = objs.find((o) => o.kind === 'Fleet');
  const pod = fleet ? fleet.spec.template.spec.template : find(objs, 'StatefulSet').spec.template;
  return pod.spec.containers.find((c: Container) => c.name === 'reactor');
};

describe('deploy/helm/reactor', () => {
  it('passes helm lint for the default values with a token and for each ci/*-values.yaml', () => {
    for (const args of [
      ['--set', `auth.token=${TOKEN}`],
      ['-f', join(chart, 'ci/agones-values.yaml')],
      ['-f', join(chart, 'ci/plain-values.yaml')],
    ]) {
      const r = runHelm(['lint', chart, '--strict', ...args]);
      expect(r.stderr + r.stdout, args.join(' ')).toContain('1 chart(s) linted, 0 chart(s) failed');
      expect(r.status).toBe(0);
    }
  });

  describe('the Agones variant', () => {
    it('gpu.slotHostPath (gpu.sessions_per_gpu, issue 42): the node folder mounted in every instance, REACTOR_GPU_SLOT_DIR pointing at it, every object valid', () => {
      const objs = render({ 'gpu.slotHostPath': '/var/lib/reactor/gpu-slots' }, ['ci/agones-values.yaml']);
      expect(objs.flatMap(problems)).toEqual([]);
      const pod = find(objs, 'Fleet').spec.template.spec.template.spec;
      expect(pod.volumes).toContainEqual({ name: 'gpu-slots', hostPath: { path: '/var/lib/reactor/gpu-slots', type: 'DirectoryOrCreate' } });
      const c = instanceContainer(objs);
      expect(c.volumeMounts).toContainEqual({ name: 'gpu-slots', mountPath: '/var/run/reactor/gpu-slots' });
      expect(c.env).toContainEqual({ name: 'REACTOR_GPU_SLOT_DIR', value: '/var/run/reactor/gpu-slots' });
      // Without it: no host folder at all.
      const plain = render({}, ['ci/agones-values.yaml']);
      expect(JSON.stringify(plain)).not.toContain('gpu-slots');
    });

    it('renders the Fleet, its autoscaler, the router with its RBAC and the ServiceMonitor, every object valid', () => {
      const objs = render({}, ['ci/agones-values.yaml']);
      expect(kinds(objs)).toEqual([
        'Deployment/rx-reactor-router',
        'Fleet/rx-reactor',
        'FleetAutoscaler/rx-reactor',
        'Role/rx-reactor-router',
        'RoleBinding/rx-reactor-router',
        'Secret/rx-reactor-token',
        'Service/rx-reactor-instances',
        'Service/rx-reactor-router',
        'ServiceAccount/rx-reactor-router',
        'ServiceMonitor/rx-reactor',
      ]);
      expect(objs.flatMap(problems)).toEqual([]);
    });

    it('gives the Fleet GPUs from gpu.count, the server probes, a grace period over the session grace, eviction OnUpgrade and 5 s x 3 health', () => {
      const objs = render({}, ['ci/agones-values.yaml']);
      const fleet = find(objs, 'Fleet');
      const gs = fleet.spec.template.spec;
      expect(gs.eviction).toEqual({ safe: 'OnUpgrade' });
      // The first Health() may come up to 30 + (3 - 1) x 5 = 40 s after the container starts (instances took 10-25 s with 10-12 starting at once).
      expect(gs.health).toEqual({ disabled: false, initialDelaySeconds: 30, periodSeconds: 5, failureThreshold: 3 });
      expect(gs.container).toBe('reactor');
      // Never 8080: the Agones SDK sidecar's health server listens there in every GameServer pod.
      expect(gs.ports).toEqual([{ name: 'default', portPolicy: 'Dynamic', containerPort: 8000, protocol: 'TCP' }]);
      expect(gs.template.spec.terminationGracePeriodSeconds).toBeGreaterThanOrEqual(60);
      expect(gs.template.metadata.annotations).toMatchObject({ 'reactor.dev/gpu-type': 'NVIDIA_H200', 'reactor.dev/gpu-count': '2' });
      const c = instanceContainer(objs);
      expect(c.args).toEqual(['run', '--agones', '--manifest', '/opt/reactor/reactor.yaml', '--host', '0.0.0.0', '--port', '8000']);
      // A quantity as a string, as Agones' schema of the pod template has it.
      expect(c.resources.limits['nvidia.com/gpu']).toBe('2');
      expect(c.resources.requests['nvidia.com/gpu']).toBe('2');
      // No liveness (or startup) probe of its own: Agones then injects its /gshealthz probe and acts on missed Health() pings.
      expect(c.livenessProbe).toBeUndefined();
      expect(c.startupProbe).toBeUndefined();
      expect(c.readinessProbe.httpGet).toEqual({ path: '/health/ready', port: 8000 });
      // The Fleet's ports[] declares the container port (Agones adds it to the container): not a second time here.
      expect(c.ports).toBeUndefined();
      expect(c.env.find((e) => e.name === 'REACTOR_DRAIN_TIMEOUT_MS')?.value).toBe('60000');
      expect(c.env.find((e) => e.name === 'REACTOR_TOKEN')?.valueFrom).toEqual({ secretKeyRef: { name: 'rx-reactor-token', key: 'token' } });
      expect(c.volumeMounts).toContainEqual({ name: 'shm', mountPath: '/dev/shm' });
      const autoscaler = find(objs, 'FleetAutoscaler');
      expect(autoscaler.spec).toEqual({
        fleetName: fleet.metadata.name,
        policy: { type: 'Buffer', buffer: { bufferSize: 2, minReplicas: 2, maxReplicas: 20 } },
        sync: { type: 'FixedInterval', fixedInterval: { seconds: 30 } },
      });
    });

    it("raises the autoscaler's minReplicas to a count bufferSize and to 1 for a percentage, as Agones' webhook requires (issue 38)", () => {
      const buffer = (values: Record<string, string | number>) => find(render(values, ['ci/agones-values.yaml']), 'FleetAutoscaler').spec.policy.buffer;
      expect(buffer({ 'agones.autoscaler.bufferSize': 5 })).toEqual({ bufferSize: 5, minReplicas: 5, maxReplicas: 20 });
      // The Fleet starts at that size too (before the autoscaler's first sync).
      expect(find(render({ 'agones.autoscaler.bufferSize': 5 }, ['ci/agones-values.yaml']), 'Fleet').spec.replicas).toBeGreaterThanOrEqual(5);
      expect(buffer({ 'agones.autoscaler.bufferSize': 1, 'agones.autoscaler.minReplicas': 3 })).toEqual({ bufferSize: 1, minReplicas: 3, maxReplicas: 20 });
      expect(buffer({ 'agones.autoscaler.bufferSize': '20%', 'agones.autoscaler.minReplicas': 0 })).toEqual({
        bufferSize: '20%',
        minReplicas: 1,
        maxReplicas: 20,
      });
      // Every one of them valid against the FleetAutoscaler schema (deploy/schemas).
      const variants: Array<Record<string, string | number>> = [
        { 'agones.autoscaler.bufferSize': 5 },
        { 'agones.autoscaler.bufferSize': '20%', 'agones.autoscaler.minReplicas': 0 },
      ];
      for (const v of variants) {
        expect(render(v, ['ci/agones-values.yaml']).flatMap(problems)).toEqual([]);
      }
    });

    it('lets the router create allocations, read and watch game servers and patch them (DELETE /sessions), nothing more, in its own namespace', () => {
      const objs = render({}, ['ci/agones-values.yaml']);
      expect(find(objs, 'Role').rules).toEqual([
        { apiGroups: ['allocation.agones.dev'], resources: ['gameserverallocations'], verbs: ['create'] },
        { apiGroups: ['agones.dev'], resources: ['gameservers'], verbs: ['get', 'list', 'watch', 'patch'] },
      ]);
      const binding = find(objs, 'RoleBinding');
      expect(binding.subjects).toEqual([{ kind: 'ServiceAccount', name: 'rx-reactor-router', namespace: 'games' }]);
      const router = find(objs, 'Deployment', 'rx-reactor-router');
      expect(router.spec.template.spec.serviceAccountName).toBe('rx-reactor-router');
      expect(router.spec.template.spec.containers[0].args.slice(0, 1)).toEqual(['route']);
      const service = find(objs, 'Service', 'rx-reactor-router');
      expect(service.spec.selector).toEqual(router.spec.selector.matchLabels);
    });

    it('points the ServiceMonitor at the instances and the router, with the token as bearer', () => {
      const objs = render({}, ['ci/agones-values.yaml']);
      const sm = find(objs, 'ServiceMonitor');
      const selected = objs.filter(
        (o) => o.kind === 'Service' && Object.entries(sm.spec.selector.matchLabels as Record<string, string>).every(([k, v]) => o.metadata.labels?.[k] === v),
      );
      expect(selected.map((s) => s.metadata.name).sort()).toEqual(['rx-reactor-instances', 'rx-reactor-router']);
      expect(sm.spec.endpoints[0]).toMatchObject({
        port: 'http',
        path: '/metrics',
        authorization: { type: 'Bearer', credentials: { name: 'rx-reactor-token', key: 'token' } },
      });
      // The headless instances Service selects the Fleet's pods, on the container port's number:
      // Agones adds the Fleet's port to the container without a name, so a named targetPort would match no pod.
      const headless = find(objs, 'Service', 'rx-reactor-instances');
      expect(headless.spec.ports).toEqual([{ name: 'http', port: 8000, targetPort: 8000, protocol: 'TCP' }]);
      expect(find(objs, 'Fleet').spec.template.spec.ports[0]).not.toHaveProperty('name', 'http');
      const podLabels = find(objs, 'Fleet').spec.template.spec.template.metadata.labels as Record<string, string>;
      expect(Object.entries(headless.spec.selector as Record<string, string>).every(([k, v]) => podLabels[k] === v)).toBe(true);
    });

    it('renders a CPU app (gpu.count 0) without a GPU request, fixed replicas without the autoscaler, no router, no Secret with existingSecret', () => {
      const objs = render({ 'auth.existingSecret': 'mine', 'agones.autoscaler.enabled': false, 'agones.replicas': 4, 'router.enabled': false });
      expect(kinds(objs)).toEqual(['Fleet/rx-reactor']);
      expect(objs.flatMap(problems)).toEqual([]);
      const c = instanceContainer(objs);
      expect(JSON.stringify(c.resources)).not.toContain('nvidia.com/gpu');
      expect(find(objs, 'Fleet').spec.replicas).toBe(4);
      expect(c.env.find((e) => e.name === 'REACTOR_TOKEN')?.valueFrom.secretKeyRef.name).toBe('mine');
    });
  });

  describe('the plain variant (agones.enabled=false)', () => {
    it('renders a StatefulSet, its Service and headless Service, no Agones object and no router, every object valid', () => {
      const objs = render({}, ['ci/plain-values.yaml']);
      expect(kinds(objs)).toEqual(['Service/rx-reactor', 'Service/rx-reactor-instances', 'StatefulSet/rx-reactor']);
      expect(objs.flatMap(problems)).toEqual([]);
      const sts = find(objs, 'StatefulSet');
      expect(sts.spec.replicas).toBe(3);
      expect(sts.spec.serviceName).toBe('rx-reactor-instances');
      expect(sts.spec.template.spec.terminationGracePeriodSeconds).toBe(90);
      const c = instanceContainer(objs);
      expect(c.args).not.toContain('--agones');
      expect(c.readinessProbe.httpGet.path).toBe('/health/ready');
      expect(find(objs, 'Service', 'rx-reactor').spec.selector).toEqual(sts.spec.selector.matchLabels);
    });
  });

  describe('alerts and the dashboard (issue 30)', () => {
    /** Metric names a PromQL expression uses (identifiers followed by `{` or `[`, and bare ones inside rate()/increase()/max()). */
    const metricsOf = (expr: string): string[] => [...expr.matchAll(/\b([a-z_][a-z0-9_]*)(?=\{|\[)/g)].map((m) => m[1]!).filter((n) => !['by'].includes(n));
    const exported = async (): Promise<Set<string>> => {
      const names = new Set<string>();
      for (const m of await new RouterMetrics().registry.getMetricsAsJSON()) {
        names.add(m.name);
        if (m.type === ('histogram' as never)) for (const s of ['_bucket', '_sum', '_count']) names.add(m.name + s);
      }
      return names;
    };

    it('renders a valid PrometheusRule (no Ready instance, 429 rate, allocation p99, Unhealthy churn) on metrics the router exports', async () => {
      const objs = render({ 'alerts.enabled': true, 'alerts.labels.release': 'kps' }, ['ci/agones-values.yaml']);
      const rule = find(objs, 'PrometheusRule');
      expect(problems(rule)).toEqual([]);
      expect(rule.metadata.labels!['release']).toBe('kps');
      const rules = rule.spec.groups.flatMap((g: { rules: Array<{ alert: string; expr: string }> }) => g.rules);
      expect(rules.map((r: { alert: string }) => r.alert)).toEqual([
        'ReactorNoReadyInstance',
        'ReactorSessionsRefused',
        'ReactorAllocationSlow',
        'ReactorUnhealthyChurn',
      ]);
      const names = await exported();
      for (const r of rules) {
        const used = metricsOf(r.expr);
        expect(used.length, r.expr).toBeGreaterThan(0);
        for (const n of used) expect(names.has(n), `${r.alert} uses ${n}, which the router does not export`).toBe(true);
        expect(r.expr).toContain('namespace="games"');
      }
      expect(render({}, ['ci/agones-values.yaml']).some((o) => o.kind === 'PrometheusRule')).toBe(false);
    });

    it('renders the dashboard JSON in a ConfigMap for Grafana, every panel on metrics the router exports', async () => {
      const objs = render({ 'dashboard.enabled': true }, ['ci/agones-values.yaml']);
      const cm = find(objs, 'ConfigMap');
      expect(problems(cm)).toEqual([]);
      expect(cm.metadata.labels!['grafana_dashboard']).toBe('1');
      const dash = JSON.parse((cm as any).data['reactor.json']) as { uid: string; panels: Array<{ title: string; targets: Array<{ expr: string }> }> };
      expect(dash.uid).toBe('reactor-fleet');
      expect(dash.panels.length).toBeGreaterThanOrEqual(5);
      const names = await exported();
      for (const p of dash.panels) for (const t of p.targets) for (const n of metricsOf(t.expr)) expect(names.has(n), `${p.title} uses ${n}`).toBe(true);
    });
  });

  describe('the router behind an Ingress with TLS (issue 30)', () => {
    it('renders a valid Ingress to the router Service, with the cert-manager annotation and the TLS secret', () => {
      const objs = render(
        {
          'router.ingress.enabled': true,
          'router.ingress.host': 'play.example.com',
          'router.ingress.className': 'nginx',
          'router.ingress.annotations.cert-manager\\.io/cluster-issuer': 'letsencrypt',
        },
        ['ci/agones-values.yaml'],
      );
      const ing = find(objs, 'Ingress');
      expect(problems(ing)).toEqual([]);
      expect(ing.metadata).toMatchObject({ annotations: { 'cert-manager.io/cluster-issuer': 'letsencrypt' } });
      expect(ing.spec).toEqual({
        ingressClassName: 'nginx',
        tls: [{ hosts: ['play.example.com'], secretName: 'reactor-router-tls' }],
        rules: [
          {
            host: 'play.example.com',
            http: { paths: [{ path: '/', pathType: 'Prefix', backend: { service: { name: 'rx-reactor-router', port: { name: 'http' } } } }] },
          },
        ],
      });
      expect(render({}, ['ci/agones-values.yaml']).some((o) => o.kind === 'Ingress')).toBe(false);
    });
  });

  describe("Agones' health check on the rendered chart (issue 30)", () => {
    it('lets Agones act on missed Health() pings: the fake controller, like Agones, ignores a container with its own liveness probe', async () => {
      const container = (variant: Record<string, string | number | boolean>) => instanceContainer(render(variant, ['ci/agones-values.yaml']));
      const cluster = new FakeAgonesCluster({ healthPeriodMs: 50, healthFailureThreshold: 2, healthInitialDelayMs: 0 });
      // The chart as rendered: no probe, so Agones' ping-based health is on.
      cluster.addServer('as-rendered', '127.0.0.1', 8000, {}, { containerLivenessProbe: container({}).livenessProbe !== undefined });
      // What the chart did before issue 30: a liveness probe of its own, and Agones' health never acts.
      cluster.addServer('with-own-probe', '127.0.0.1', 8000, {}, { containerLivenessProbe: true });
      for (const n of ['as-rendered', 'with-own-probe']) cluster.setState(n, 'Ready');
      const stop = cluster.startHealthChecks();
      try {
        await new Promise((r) => setTimeout(r, 400));
        expect(cluster.get('as-rendered').state).toBe('Unhealthy');
        expect(cluster.get('with-own-probe').state).toBe('Ready');
      } finally {
        stop();
      }
    });
  });

  describe('bad values', () => {
    const refused = (values: Record<string, string | number | boolean>, files: string[] = ['ci/agones-values.yaml']): string => {
      const r = runHelm(['template', 'rx', chart, ...files.flatMap((f) => ['-f', join(chart, f)]), ...setArgs(values)]);
      expect(r.status).not.toBe(0);
      return r.stderr;
    };

    it('refuses an unknown key or a wrong type or value through values.schema.json, naming the key', () => {
      expect(refused({ 'gpu.cuont': 2 })).toContain('gpu: Additional property cuont is not allowed');
      expect(refused({ 'gpu.slotHostPath': 'relative/slots' })).toContain('gpu.slotHostPath');
      expect(refused({ 'agones.evictionSafe': 'Sometimes' })).toContain('agones.evictionSafe');
      expect(refused({ 'gpu.count': -1 })).toContain('gpu.count');
      expect(refused({ 'app.port': 'http' })).toContain('app.port');
    });

    it('refuses what a schema cannot express with a message that says the fix', () => {
      expect(refused({}, [])).toContain('auth: set auth.existingSecret (a Secret holding the token under auth.secretKey) or auth.token');
      expect(refused({ 'auth.token': 'short' })).toContain('auth.token is 5 characters long: reactor run refuses a token under 16 characters');
      expect(refused({ terminationGracePeriodSeconds: 30 })).toContain(
        'terminationGracePeriodSeconds (30) is below sessionGraceSeconds (60): Kubernetes would SIGKILL an instance before its session',
      );
      expect(refused({ 'agones.autoscaler.bufferSize': 30 })).toContain('agones.autoscaler.bufferSize (30) is above maxReplicas (20)');
      expect(refused({ 'agones.autoscaler.minReplicas': 30 })).toContain(
        "agones.autoscaler.minReplicas (30) is above maxReplicas (20): Agones' FleetAutoscaler webhook refuses it",
      );
      expect(refused({ 'app.port': 8080 })).toContain("app.port is 8080: in a GameServer pod the Agones SDK sidecar's health server listens on :8080");
      expect(refused({ 'agones.drainSeconds': 90 })).toContain('agones.drainSeconds (90) is not below terminationGracePeriodSeconds (90)');
    });
  });

  describe('the schemas themselves', () => {
    it('refuse a typo or a wrong value in a CRD object and a wrong type in a core object', () => {
      const objs = render({}, ['ci/agones-values.yaml']);
      const fleet = structuredClone(find(objs, 'Fleet'));
      fleet.spec.template.spec.helth = fleet.spec.template.spec.health;
      fleet.spec.template.spec.eviction.safe = 'Sometimes';
      expect(problems(fleet).join('\n')).toMatch(/must NOT have additional properties.*helth[\s\S]*must be equal to one of the allowed values/);
      const broken = structuredClone(fleet);
      delete broken.spec.template.spec.helth;
      broken.spec.template.spec.eviction.safe = 'OnUpgrade';
      broken.spec.template.spec.template.spec.containers[0].ports = [{ containerPort: 'http' }];
      expect(problems(broken).join('\n')).toContain('containerPort must be integer');
      const router = structuredClone(find(objs, 'Deployment'));
      router.spec.replicas = 'two';
      expect(problems(router).join('\n')).toContain('/spec/replicas must be integer');
    });

    it('describe every key of values.yaml in values.schema.json and no key values.yaml lacks', () => {
      const values = parseYaml(readFileSync(join(chart, 'values.yaml'), 'utf8')) as Record<string, unknown>;
      const schema = JSON.parse(readFileSync(join(chart, 'values.schema.json'), 'utf8')) as { properties: Record<string, any> };
      const valueKeys = (o: Record<string, unknown>, prefix = ''): string[] =>
        Object.entries(o).flatMap(([k, v]) =>
          v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length > 0 && !isFreeMap(prefix + k)
            ? [prefix + k, ...valueKeys(v as Record<string, unknown>, `${prefix}${k}.`)]
            : [prefix + k],
        );
      const schemaKeys = (props: Record<string, any>, prefix = ''): string[] =>
        Object.entries(props).flatMap(([k, v]) =>
          v.properties && !isFreeMap(prefix + k) ? [prefix + k, ...schemaKeys(v.properties, `${prefix}${k}.`)] : [prefix + k],
        );
      const fromSchema = schemaKeys(schema.properties).filter((k) => k !== 'global');
      expect(valueKeys(values).sort()).toEqual(fromSchema.sort());
    });
  });
});

describe('reactor deploy values', { timeout: 90_000 }, () => {
  const dirs: string[] = [];
  const temp = (): string => {
    const d = mkdtempSync(join(tmpdir(), 'reactor-deploy-'));
    dirs.push(d);
    return d;
  };
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });
  const deployValues = (...args: string[]) => spawnSync(process.execPath, [cli, 'deploy', ...args], { encoding: 'utf8', cwd: repo, timeout: 60_000 });

  it("prints the workspace reactor.yaml's GPUs, name and port, and helm renders them into the Fleet", () => {
    const r = deployValues('values', '--manifest', join(repo, 'reactor.yaml'));
    // The workspace's reactor.yaml serves on 8080 locally; in a GameServer pod that is the sidecar's port.
    expect(r.stderr).toContain('server.port is 8080 in');
    expect(r.stderr).toContain("the Agones SDK sidecar's health port (the two would clash); app.port is 8000");
    expect(r.status).toBe(0);
    expect(parseYaml(r.stdout)).toEqual({
      app: { name: 'reactor-video', manifest: '/opt/reactor/reactor.yaml', port: 8000 },
      gpu: { count: 2, type: 'NVIDIA_H200' },
    });
    const file = join(temp(), 'values.reactor.yaml');
    writeFileSync(file, r.stdout);
    const objs = render({ 'auth.token': TOKEN }, [file]);
    expect(objs.flatMap(problems)).toEqual([]);
    const c = instanceContainer(objs);
    expect(c.resources.limits['nvidia.com/gpu']).toBe('2');
    expect(find(objs, 'Fleet').metadata.labels!['reactor.dev/app']).toBe('reactor-video');
  });

  it("takes the app's own name without model.name, the manifest's place in the image, origins, and warns about a baked-in token", () => {
    const dir = temp();
    writeFileSync(join(dir, 'pnpm-workspace.yaml'), 'packages: []\n');
    const app = join(dir, 'apps/mine');
    mkdirSync(app, { recursive: true });
    writeFileSync(
      join(app, 'reactor.yaml'),
      [
        `runtime: { import: ${join(repo, 'apps/video/dist/index.js')}:VideoApp, session_grace_ms: 120500 }`,
        'server: { port: 0, token: a-token-of-16-chars-or-more, allowed_origins: [https://app.example] }',
        '',
      ].join('\n'),
    );
    const r = deployValues('values', '--manifest', join(app, 'reactor.yaml'), '--image-root', '/srv/bundle');
    expect(r.status).toBe(0);
    expect(parseYaml(r.stdout)).toEqual({
      app: { name: 'reactor-video', manifest: '/srv/bundle/apps/mine/reactor.yaml', port: 8000 },
      gpu: { count: 0 },
      auth: { allowedOrigins: ['https://app.example'] },
      sessionGraceSeconds: 121,
      terminationGracePeriodSeconds: 151,
    });
    // The chart accepts them (the termination grace covers the session grace).
    const file = join(dir, 'values.yaml');
    writeFileSync(file, r.stdout);
    const objs = render({ 'auth.token': TOKEN }, [file]);
    expect(find(objs, 'Fleet').spec.template.spec.template.spec.terminationGracePeriodSeconds).toBe(151);
    expect(r.stderr).toContain('sets server.token: it would be baked into the image; give the chart auth.existingSecret instead');
    expect(r.stderr).toContain('server.port is 0');
  });

  it('refuses another target with the usage', () => {
    const r = deployValues('chart');
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('reactor: unknown deploy target "chart"; the one target is "values"');
    expect(r.stderr).toContain('[cli_usage]');
  });
});

/** Values whose keys are free-form (resource maps, security contexts). */
function isFreeMap(path: string): boolean {
  return /(^|\.)(resources|podSecurityContext)$/.test(path);
}

describe('deploy/helm/reactor: WebRTC media (issue 24)', () => {
  const turn = {
    'webrtc.iceServers[0].urls': 'turn:turn.example.net:3478?transport=udp',
    'webrtc.iceServers[0].username': 'u',
    'webrtc.iceServers[0].credential': 'p',
  };

  it('under Agones opens a UDP Passthrough port named webrtc beside the app port, and passes the ICE servers and policy', () => {
    const objs = render({ 'webrtc.enabled': true, ...turn, 'webrtc.iceTransportPolicy': 'relay' }, ['ci/agones-values.yaml']);
    expect(objs.flatMap(problems)).toEqual([]);
    const gs = find(objs, 'Fleet').spec.template.spec;
    // Passthrough: Agones picks the host port and gives the container the same; the instance reads it from the SDK.
    expect(gs.ports).toEqual([
      { name: 'default', portPolicy: 'Dynamic', containerPort: 8000, protocol: 'TCP' },
      { name: 'webrtc', portPolicy: 'Passthrough', protocol: 'UDP' },
    ]);
    const c = instanceContainer(objs);
    const env = Object.fromEntries(c.env.map((e) => [e.name, e.value ?? e.valueFrom]));
    expect(JSON.parse(env['REACTOR_WEBRTC_ICE_SERVERS'])).toEqual([{ urls: 'turn:turn.example.net:3478?transport=udp', username: 'u', credential: 'p' }]);
    expect(env['REACTOR_WEBRTC_ICE_TRANSPORT_POLICY']).toBe('relay');
    // The port and address come from the GameServer, not from the chart.
    expect(env['REACTOR_WEBRTC_PORT']).toBeUndefined();
    expect(env['REACTOR_WEBRTC_UDP_PORT_RANGE']).toBeUndefined();
    expect(env['REACTOR_WEBRTC_ADVERTISE_ADDRESS']).toBeUndefined();
  });

  it("in the plain variant opens webrtc.port as a hostPort (UDP) and advertises the node's IP", () => {
    const objs = render({ 'webrtc.enabled': true, 'webrtc.port': 7411 }, ['ci/plain-values.yaml']);
    expect(objs.flatMap(problems)).toEqual([]);
    const c = instanceContainer(objs);
    expect(c.ports).toContainEqual({ name: 'webrtc', containerPort: 7411, hostPort: 7411, protocol: 'UDP' });
    // werift takes no one-port range: [port, port + 1], the advertised node address binds the first.
    expect(c.env).toContainEqual({ name: 'REACTOR_WEBRTC_UDP_PORT_RANGE', value: '7411-7412' });
    expect(c.env).toContainEqual({ name: 'REACTOR_WEBRTC_ADVERTISE_ADDRESS', valueFrom: { fieldRef: { fieldPath: 'status.hostIP' } } });
    expect(c.env.map((e) => e.name)).not.toContain('REACTOR_WEBRTC_ICE_SERVERS');
  });

  it('opens no UDP port by default', () => {
    for (const file of ['ci/agones-values.yaml', 'ci/plain-values.yaml']) {
      const objs = render({}, [file]);
      const fleet = objs.find((o) => o.kind === 'Fleet');
      const ports = [...(fleet?.spec.template.spec.ports ?? []), ...(instanceContainer(objs).ports ?? [])];
      expect(ports.filter((p: { protocol: string }) => p.protocol === 'UDP')).toEqual([]);
      expect(instanceContainer(objs).env.map((e) => e.name)).not.toContain('REACTOR_WEBRTC_UDP_PORT_RANGE');
    }
  });

  it('refuses a wrong ICE policy or a non-STUN/TURN URL, naming the key', () => {
    const policy = runHelm(['template', 'rx', chart, '-f', join(chart, 'ci/agones-values.yaml'), '--set-string', 'webrtc.iceTransportPolicy=udp']);
    expect(policy.status).not.toBe(0);
    expect(policy.stderr).toMatch(/webrtc\.iceTransportPolicy|webrtc\/iceTransportPolicy|iceTransportPolicy/);
    const url = runHelm([
      'template',
      'rx',
      chart,
      '-f',
      join(chart, 'ci/agones-values.yaml'),
      '--set-string',
      'webrtc.iceServers[0].urls=http://turn.example.net',
    ]);
    expect(url.status).not.toBe(0);
    expect(url.stderr).toMatch(/iceServers/);
  });
});
