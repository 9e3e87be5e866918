import { describe, expect, it } from 'vitest';
import { AppDefinitionError, ApplicationError, CommandError, ReactorError, RuntimeErrorCode } from '../../src/index.js';

describe('errors', () => {
  it('carry a stable code, a name and the member at fault', () => {
    const e = new AppDefinitionError(RuntimeErrorCode.InvalidDefault, 'VideoState', 'prompt', 'default breaks its constraints');
    expect([e.code, e.name, e.className, e.member, e.message]).toEqual([
      'invalid_default',
      'AppDefinitionError',
      'VideoState',
      'prompt',
      'VideoState.prompt: default breaks its constraints',
    ]);
    expect(e).toBeInstanceOf(ReactorError);
    expect(new ReactorError('x', 'y', { cause: 1 }).cause).toBe(1);
  });

  it('CommandError keeps its code and message; an empty code is a TypeError', () => {
    const e = new CommandError('not_ready', 'warming up');
    expect([e.code, e.message, e.name]).toEqual(['not_ready', 'warming up', 'CommandError']);
    expect(() => new CommandError('', 'x')).toThrow(TypeError);
    expect(new ApplicationError('paused').code).toBe('application_error');
  });

  it('every code is distinct and listed in docs/errors.md', async () => {
    const codes = Object.values(RuntimeErrorCode);
    expect(new Set(codes).size).toBe(codes.length);
    const { readFile } = await import('node:fs/promises');
    const doc = await readFile(new URL('../../../../docs/errors.md', import.meta.url), 'utf8');
    const section = doc.slice(doc.indexOf('## @reactor/runtime (app model)'), doc.indexOf('## @reactor/distributed'));
    for (const code of codes) expect(section, code).toContain(`\`${code}\``);
  });
});
