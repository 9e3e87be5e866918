// The model package's own tests (python/tests: the golden comparison with the reference, the
// checkpoint loader's refusals, the cache rules), run as a user runs them:
// `python3 -m unittest discover -s tests` in apps/world/python, with Debian's torch on CPU.
import { spawnSync } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const PY = process.env['REACTOR_TEST_PYTHON'] ?? '/usr/bin/python3';
const here = dirname(fileURLToPath(import.meta.url));
const pyRoot = resolve(here, '../python');
const sdk = resolve(here, '../../../packages/distributed/python');

describe('reactor_world (python -m unittest)', () => {
  it('matches the reference on the small config, refuses bad checkpoints by key, and keeps the cache rules', () => {
    const r = spawnSync(PY, ['-m', 'unittest', 'discover', '-s', 'tests', '-t', '.', '-v'], {
      cwd: pyRoot,
      env: { ...process.env, PYTHONPATH: sdk, PYTHONDONTWRITEBYTECODE: '1' },
      encoding: 'utf8',
      timeout: 240_000,
    });
    const out = `${r.stdout}\n${r.stderr}`;
    expect(out, out).toMatch(/\nOK\s*$/);
    expect(r.status, out).toBe(0);
    // Every test module ran: the golden comparison among them.
    for (const name of [
      'test_five_chunks_match_the_reference_loop_through_the_rolling_cache',
      'test_a_truncated_safetensors_file_is_named_truncated',
      'test_a_prompt_switch_recaches_the_kept_frames_under_the_new_prompt',
    ]) {
      expect(out).toContain(name);
    }
    const ran = Number(/Ran (\d+) tests?/.exec(out)?.[1] ?? 0);
    expect(ran).toBeGreaterThanOrEqual(25);
  }, 250_000);
});
