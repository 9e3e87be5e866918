/**
 * One error scheme across the packages: every code of every package is snake_case, listed once
 * in docs/errors.md, and every code a client can receive is in the wire protocol's lists (and
 * in docs/protocol.md).
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ClientErrorCode, HttpErrorCode, WireErrorCode } from '@reactor/client';
import { ProtocolErrorCode } from '@reactor/protocol';
import { AgonesErrorCode } from '@reactor/agones';
import { CliErrorCode } from '@reactor/cli';
import { DistributedErrorCode } from '@reactor/distributed';
import { ReadinessCode, RuntimeErrorCode } from '@reactor/runtime';
import { ServerErrorCode } from '@reactor/server';
import { RouterErrorCode } from '@reactor/router';
import { VideoErrorCode } from '@reactor/app-video';
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
});
