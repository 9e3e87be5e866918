import 'reflect-metadata';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { IsInt, IsOptional, IsString, Max, Min } from 'class-validator';
import { AppConfigError, ReactorError, configKeys, loadAppConfig } from '@reactor/runtime';

class DemoConfig {
  @IsInt() @Min(1) @Max(8) worldSize = 2;
  @IsOptional() @IsString() python?: string;
  @IsInt() @Min(100) callTimeoutMs = 1000;
}

class OwnError extends ReactorError {
  constructor(message: string) {
    super('demo_config_invalid', message);
  }
}

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
function file(text: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'reactor-app-config-'));
  dirs.push(dir);
  const path = join(dir, 'config.yaml');
  writeFileSync(path, text);
  return path;
}
function error(fn: () => unknown): Error {
  try {
    fn();
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected a throw');
}

describe('loadAppConfig', () => {
  it('gives the defaults without a file, and the file over them', () => {
    expect(loadAppConfig(DemoConfig, undefined)).toEqual(new DemoConfig());
    const cfg = loadAppConfig(DemoConfig, file('worldSize: 4\npython: python3\n'));
    expect(cfg).toBeInstanceOf(DemoConfig);
    expect(cfg).toMatchObject({ worldSize: 4, python: 'python3', callTimeoutMs: 1000 });
  });

  it('names every bad and unknown key at once, listing the declared keys in declaration order', () => {
    const path = file('worldSize: 0\ncallTimeoutMs: 5\nworld_size: 2\n');
    const err = error(() => loadAppConfig(DemoConfig, path));
    expect(err).toBeInstanceOf(AppConfigError);
    expect((err as AppConfigError).code).toBe('app_config_invalid');
    expect(err.message).toBe(
      `${path} is invalid:\n` +
        '  - worldSize: worldSize must not be less than 1\n' +
        '  - callTimeoutMs: callTimeoutMs must not be less than 100\n' +
        '  - world_size: unknown key (known: worldSize, python, callTimeoutMs)',
    );
    expect(configKeys(DemoConfig)).toEqual(['worldSize', 'python', 'callTimeoutMs']);
  });

  it("uses the app's name, error and key list when given", () => {
    const missing = join(tmpdir(), 'reactor-app-config-missing', 'none.yaml');
    const unreadable = error(() => loadAppConfig(DemoConfig, missing, { name: 'demo app', error: (m) => new OwnError(m) }));
    expect(unreadable).toBeInstanceOf(OwnError);
    expect(unreadable.message).toMatch(new RegExp(`^cannot read the demo app config ${missing}: ENOENT`));
    const list = file('- 1\n- 2\n');
    expect(error(() => loadAppConfig(DemoConfig, list, { error: (m) => new OwnError(m) })).message).toBe(`${list} must be a mapping of config keys`);
    const extra = file('other: 1\n');
    expect(error(() => loadAppConfig(DemoConfig, extra, { keys: ['callTimeoutMs', 'worldSize', 'python'] })).message).toBe(
      `${extra} is invalid:\n  - other: unknown key (known: callTimeoutMs, worldSize, python)`,
    );
  });

  it('reads an empty file as the defaults, and JSON as well as YAML', () => {
    expect(loadAppConfig(DemoConfig, file(''))).toEqual(new DemoConfig());
    expect(loadAppConfig(DemoConfig, file('{"worldSize": 3}'))).toMatchObject({ worldSize: 3 });
  });
});
