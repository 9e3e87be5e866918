/**
 * One error scheme across the packages: every code of every package is snake_case, listed once
 * in docs/errors.md, and every code a client can receive is in the wire protocol's lists (and
 * in docs/protocol.md).
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ClientErrorCode, HttpErrorCode, WebRtcFailedError, WireErrorCode } from '@reactor/client';
import { CodedError, ProtocolErrorCode } from '@reactor/protocol';
import { AgonesErrorCode } from '@reactor/agones';
import { CliErrorCode, ManifestError } from '@reactor/cli';
import { DistributedErrorCode } from '@reactor/distributed';
import { ReadinessCode, RuntimeErrorCode } from '@reactor/runtime';
import { ServerErrorCode } from '@reactor/server';
import { RouterError, RouterErrorCode } from '@reactor/router';
import { VideoConfigError, VideoErrorCode } from '@reactor/app-video';
import { CameraErrorCode } from '@reactor/app-camera';
import { EnhanceErrorCode } from '@reactor/app-enhance';
import { WorldErrorCode } from '@reactor/app-world';

const maps: Record<string, Record<string, string>> = {
  RuntimeErrorCode,
  ReadinessCode,
  DistributedErrorCode,
  ServerErrorCode,
  RouterErrorCode,
  CliErrorCode,
  AgonesErrorCode,
  WireErrorCode,
  HttpErrorCode,
  ProtocolErrorCode,
  ClientErrorCode,
  VideoErrorCode,
  CameraErrorCode,
  EnhanceErrorCode,
  WorldErrorCode,
};

const doc = (name: string): string => readFileSync(new URL(`../docs/${name}`, import.meta.url), 'utf8');

/** Codes in the first cell of a table row: "| `code` | ...". */
function documentedCodes(markdown: string): string[] {
  return [...markdown.matchAll(/^\| `([a-z][a-z0-9_]*)` \|/gm)].map((m) => m[1]!);
}

describe('error codes', () => {
  it('are snake_case strings, distinct within each package', () => {
    for (const [name, map] of Object.entries(maps)) {
      const values = Object.values(map);
      expect(values.length, name).toBeGreaterThan(0);
      for (const code of values) expect(code, `${name}: ${code}`).toMatch(/^[a-z][a-z0-9_]*$/);
      expect(new Set(values).size, `${name} repeats a code`).toBe(values.length);
    }
  });

  it('are each listed exactly once in docs/errors.md, which lists no code that no package has', () => {
    const listed = documentedCodes(doc('errors.md'));
    const all = new Set(Object.values(maps).flatMap((m) => Object.values(m)));
    const counts = new Map<string, number>();
    for (const c of listed) counts.set(c, (counts.get(c) ?? 0) + 1);
    const missing = [...all].filter((c) => !counts.has(c));
    const twice = [...counts].filter(([, n]) => n > 1).map(([c]) => c);
    const stale = [...counts.keys()].filter((c) => !all.has(c));
    expect({ missing, twice, stale }).toEqual({ missing: [], twice: [], stale: [] });
  });

  it('that a client can receive are in the wire protocol lists and in docs/protocol.md', () => {
    const wire = new Set<string>([...Object.values(WireErrorCode), ...Object.values(HttpErrorCode)]);
    const fromServer = Object.values(ServerErrorCode).filter((c) => !wire.has(c));
    expect(fromServer, 'ServerErrorCode values missing from WireErrorCode/HttpErrorCode').toEqual([]);
    const protocol = doc('protocol.md');
    const undocumented = [...wire].filter((c) => !protocol.includes(`\`${c}\``));
    expect(undocumented, 'wire codes missing from docs/protocol.md').toEqual([]);
  });

  it('come from classes that are each a CodedError named after its class, which CodedError sets: no class sets its name by hand', () => {
    const root = new URL('..', import.meta.url).pathname;
    const sources = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
        e.name === 'node_modules' || e.name === 'dist' ? [] : e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
      );
    const files = ['packages', 'apps'].flatMap((group) =>
      readdirSync(join(root, group)).flatMap((pkg) => {
        try {
          return sources(join(root, group, pkg, 'src'));
        } catch {
          return [];
        }
      }),
    );
    const byHand: string[] = [];
    const plainErrors: string[] = [];
    for (const file of files) {
      const text = readFileSync(file, 'utf8');
      const rel = file.slice(root.length);
      for (const m of text.matchAll(/class (\w+) extends (Error|TypeError|RangeError)\b/g)) if (m[1] !== 'CodedError') plainErrors.push(`${rel}: ${m[1]}`);
      // An error's name written by hand: a class field, or this.name in a constructor of a class that extends an error
      // (CallAbortedError is named AbortError on purpose: what fetch() callers test for).
      for (const m of text.matchAll(/class (\w+) extends \w*Error\b[^{]*\{([\s\S]*?)\n\}/g)) {
        if (/override name =|this\.name = /.test(m[2]!) && m[1] !== 'CallAbortedError' && m[1] !== 'CodedError') byHand.push(`${rel}: ${m[1]}`);
      }
    }
    expect(files.length).toBeGreaterThan(100);
    expect(plainErrors, 'error classes that skip CodedError (no stable code)').toEqual([]);
    expect(byHand, 'error classes that set their name by hand (CodedError names each after its class)').toEqual([]);
    // The names as a user's log shows them, for classes that used to inherit their parent's name or set their own.
    const made: CodedError[] = [
      new ManifestError('x'),
      new VideoConfigError('x'),
      new RouterError(RouterErrorCode.KubeConfigInvalid, 'x'),
      new WebRtcFailedError('x'),
    ];
    expect(made.map((e) => [e instanceof CodedError, e.name, String(e).split(':')[0]])).toEqual([
      [true, 'ManifestError', 'ManifestError'],
      [true, 'VideoConfigError', 'VideoConfigError'],
      [true, 'RouterError', 'RouterError'],
      [true, 'WebRtcFailedError', 'WebRtcFailedError'],
    ]);
  });
});
