/**
 * deploy/docker/Dockerfile against the bundle's layout, without Docker (not available on this
 * machine, nor a Dockerfile linter): what the Dockerfile ADDs is the file scripts/bundle/make.sh
 * writes and the only one .dockerignore lets into the context; the paths ENTRYPOINT and CMD use
 * inside the image are files make.sh puts in the bundle; the image's user, manifest path and
 * port are the chart's and `reactor deploy values`' defaults. Building and running the image is
 * not exercised here.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { DEFAULT_POD_PORT, IMAGE_ROOT } from '@reactor/cli';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const dockerfile = readFileSync(join(repo, 'deploy/docker/Dockerfile'), 'utf8');
const makeSh = readFileSync(join(repo, 'scripts/bundle/make.sh'), 'utf8');

/** The Dockerfile's instructions (continuation lines joined, comments dropped). */
function instructions(text: string): Array<{ op: string; args: string }> {
  return text
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'))
    .map((l) => {
      const [op, ...rest] = l.split(/\s+/);
      return { op: op!.toUpperCase(), args: rest.join(' ') };
    });
}
const ins = instructions(dockerfile);
const one = (op: string): string => {
  const found = ins.filter((i) => i.op === op);
  expect(found, op).toHaveLength(1);
  return found[0]!.args;
};

/** make.sh's default output, relative to the repository root. */
function bundleOutput(): string {
  const m = /^out=\$\{1:-\$root\/([^}]+)\}$/m.exec(makeSh);
  if (!m) throw new Error('scripts/bundle/make.sh no longer has its out=${1:-$root/...} line; update this test');
  return m[1]!;
}

/** Whether .dockerignore lets `path` into the context (Docker's rule: the last matching line wins). */
function inContext(path: string, lines: string[]): boolean {
  let included = true;
  for (const raw of lines) {
    const neg = raw.startsWith('!');
    const pattern = neg ? raw.slice(1) : raw;
    const re = new RegExp(`^${pattern.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*')}(/.*)?$`);
    if (re.test(path)) included = neg;
  }
  return included;
}

describe('deploy/docker/Dockerfile', () => {
  it("ADDs make.sh's bundle, unpacked under the image root, and copies nothing else", () => {
    expect(ins.filter((i) => i.op === 'COPY')).toEqual([]);
    const [src, dest] = one('ADD').split(/\s+/);
    expect(src).toBe(bundleOutput());
    // The archive's top folder is reactor/ (make.sh tars $work/reactor), so /opt/ + reactor/ is the image root.
    expect(makeSh).toMatch(/stage=\$work\/reactor\n/);
    expect(makeSh).toContain('tar -C "$work" -cf - reactor');
    expect(`${dest}reactor`).toBe(IMAGE_ROOT);
    expect(one('WORKDIR')).toBe(IMAGE_ROOT);
  });

  it('has a .dockerignore that sends the bundle and nothing else', () => {
    const lines = readFileSync(join(repo, '.dockerignore'), 'utf8')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l !== '' && !l.startsWith('#'));
    expect(inContext(bundleOutput(), lines)).toBe(true);
    for (const other of ['packages/cli/dist/main.js', 'node_modules/ws/index.js', '.bundle/debs/x.deb', 'reactor.yaml', '.git/HEAD']) {
      expect(inContext(other, lines), other).toBe(false);
    }
  });

  it('starts run.sh reactor run --agones with the manifest, files the bundle holds', () => {
    const entry = JSON.parse(one('ENTRYPOINT')) as string[];
    const cmd = JSON.parse(one('CMD')) as string[];
    expect(entry).toEqual([`${IMAGE_ROOT}/run.sh`, 'reactor']);
    expect(cmd.slice(0, 4)).toEqual(['run', '--agones', '--manifest', `${IMAGE_ROOT}/reactor.yaml`]);
    // run.sh: make.sh copies it to the bundle's root; its "reactor" case runs the CLI's dist, which make.sh includes.
    expect(makeSh).toContain('cp "$root/scripts/bundle/run.sh" "$stage/run.sh"');
    expect(readFileSync(join(repo, 'scripts/bundle/run.sh'), 'utf8')).toContain('reactor) shift; exec "$node" packages/cli/dist/main.js "$@"');
    expect(makeSh).toMatch(/find packages apps -path '\*\/node_modules' -prune -o -path '\*\/dist\/\*'/);
    // reactor.yaml: a tracked file at the root, which make.sh's git ls-files copies (it leaves out only test/, docs/, bench/).
    expect(execFileSync('git', ['ls-files', 'reactor.yaml', 'scripts/bundle/run.sh'], { cwd: repo, encoding: 'utf8' }).trim().split('\n')).toEqual([
      'reactor.yaml',
      'scripts/bundle/run.sh',
    ]);
    expect(cmd).toContain(String(DEFAULT_POD_PORT));
    expect(one('EXPOSE')).toBe(String(DEFAULT_POD_PORT));
  });

  it("runs as the chart's user and asks the NVIDIA runtime for compute and graphics (Vulkan)", () => {
    const values = parseYaml(readFileSync(join(repo, 'deploy/helm/reactor/values.yaml'), 'utf8')) as {
      podSecurityContext: { runAsUser: number; runAsGroup: number };
      app: { manifest: string; port: number };
      gpu: { driverCapabilities: string };
    };
    expect(one('USER')).toBe(`${values.podSecurityContext.runAsUser}:${values.podSecurityContext.runAsGroup}`);
    expect(values.app.manifest).toBe(`${IMAGE_ROOT}/reactor.yaml`);
    expect(values.app.port).toBe(DEFAULT_POD_PORT);
    const env = one('ENV');
    expect(env).toContain(`NVIDIA_DRIVER_CAPABILITIES=${values.gpu.driverCapabilities}`);
    expect(env).toContain('NVIDIA_VISIBLE_DEVICES=all');
    expect(one('FROM')).toBe('debian:bookworm-slim');
  });
});
