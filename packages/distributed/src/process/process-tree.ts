/**
 * The process table (Linux /proc), for tests that check no process is left behind.
 * @internal
 */
import { readdirSync, readFileSync } from 'node:fs';

/** Every live descendant of `pid`, children first (by walking /proc). */
export function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(d)]);
    } catch {
      // the process ended while we looked
    }
  }
  const out: number[] = [];
  for (let todo = [pid]; todo.length > 0;) {
    const next = todo.flatMap((p) => children.get(p) ?? []);
    out.push(...next);
    todo = next;
  }
  return out;
}

/** Whether `pid` is a live process (a zombie, exited and not yet reaped, is not). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return !readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z ');
  } catch {
    return false;
  }
}
