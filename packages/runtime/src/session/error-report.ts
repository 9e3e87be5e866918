/**
 * How an error that came from a rank reads wherever it surfaces (the server log, the session
 * status, the viewer's error card, `reactor run` on exit): its first line, then the frames of the
 * rank that raised it, innermost last and bounded. A `DistributedRunner` rebuilds a rank's error
 * with `rank` and `rankStack` (a Python traceback, or a TypeScript rank's stack); a desync carries
 * the raising rank's error as its `cause`. Duck-typed: the app model does not depend on the runner.
 * @internal
 */

/** How many frames of a rank's stack a report shows: the innermost ones, where the error is. */
export const REPORT_FRAMES = 8;

interface RankFacts {
  rank?: unknown;
  rankStack?: unknown;
}

/** The error of `err`'s cause chain that carries a rank's stack, if any. */
function rankError(err: unknown): { rank: number | undefined; stack: string } | undefined {
  let e: unknown = err;
  for (let depth = 0; depth < 5 && e instanceof Error; depth++) {
    const { rank, rankStack } = e as Error & RankFacts;
    if (typeof rankStack === 'string' && rankStack.length > 0) return { rank: typeof rank === 'number' ? rank : undefined, stack: rankStack };
    e = e.cause;
  }
  return undefined;
}

/** One frame of a stack: where (file, line, function) and the source line when the stack has it. */
interface Frame {
  file: string;
  line: number;
  fn: string;
  lines: string[];
}

const PY_FRAME = /^\s*File "(.+)", line (\d+), in (.+)$/;
const JS_FRAME = /^\s*at (?:(.+?) \()?(.+?):(\d+):\d+\)?$/;

/** The frames of a Python traceback (its last block) or of a JavaScript stack, innermost last. */
function parseFrames(stack: string): Frame[] {
  const lines = stack.split('\n');
  if (lines.some((l) => PY_FRAME.test(l))) {
    const start = lines.lastIndexOf('Traceback (most recent call last):');
    const frames: Frame[] = [];
    for (const l of lines.slice(start + 1)) {
      const m = PY_FRAME.exec(l);
      if (m) frames.push({ file: m[1]!, line: Number(m[2]), fn: m[3]!, lines: [l] });
      // The source line is kept; 3.11's ^^^^ markers under it are not (their columns mean little out of a terminal).
      else if (/^\s/.test(l) && frames.length > 0) {
        if (!/^\s*[~^]+\s*$/.test(l)) frames[frames.length - 1]!.lines.push(l);
      } else if (frames.length > 0) break; // the exception's own line ends the block
    }
    return frames;
  }
  const frames: Frame[] = [];
  for (const l of lines) {
    const m = JS_FRAME.exec(l);
    if (m) frames.push({ file: m[2]!, line: Number(m[3]), fn: m[1] ?? '<anonymous>', lines: [l] });
  }
  // A JavaScript stack lists the innermost frame first.
  return frames.reverse();
}

/** The framework's own frames (the rank's loop, Node's internals) say nothing about the app. */
function isOwnFrame(f: Frame): boolean {
  return (
    /[/\\]reactor_worker[/\\]_rank\.py$/.test(f.file) ||
    f.file.startsWith('<frozen ') ||
    f.file.startsWith('node:') ||
    /@reactor[/\\]distributed[/\\]|packages[/\\]distributed[/\\]dist[/\\]/.test(f.file)
  );
}

/**
 * The app's frames of a rank's stack, innermost last; none when every frame is the framework's
 * (an error the rank itself raised about the app, such as a module that does not parse, whose
 * message names the file and line already).
 */
function appFrames(stack: string): Frame[] {
  return parseFrames(stack).filter((f) => !isOwnFrame(f));
}

/**
 * Where a rank's error was raised, in one line: `rank 1, worker/app_worker.py line 39, in
 * generate` (the innermost frame of the app's code), or undefined for an error without a rank's
 * stack.
 */
export function errorWhere(err: unknown): string | undefined {
  const found = rankError(err);
  if (!found) return undefined;
  const inner = appFrames(found.stack).at(-1);
  if (!inner) return found.rank === undefined ? undefined : `rank ${found.rank}`;
  return `${found.rank === undefined ? '' : `rank ${found.rank}, `}${inner.file} line ${inner.line}, in ${inner.fn}`;
}

/**
 * The frames of the rank that raised `err` (or its cause), innermost last, at most
 * {@link REPORT_FRAMES}, each with its source line when the stack has it; empty for an error
 * without a rank's stack.
 */
export function errorFrames(err: unknown, max = REPORT_FRAMES): string[] {
  const found = rankError(err);
  if (!found) return [];
  const frames = appFrames(found.stack);
  const shown = frames.slice(-max);
  const out = shown.flatMap((f) => f.lines.map((l, i) => `${i === 0 ? '  ' : '    '}${l.trim()}`));
  if (frames.length > shown.length) out.unshift(`  ... ${frames.length - shown.length} outer frame${frames.length - shown.length > 1 ? 's' : ''}`);
  return out;
}

/**
 * `first` (its first line with {@link errorWhere} appended in parentheses when known), then the
 * rank's frames ({@link errorFrames}): the text every surface of a rank's error shows.
 */
export function withTraceback(first: string, err: unknown): string {
  const where = errorWhere(err);
  const frames = errorFrames(err);
  const [line, ...rest] = first.split('\n');
  const head = [where === undefined ? line! : `${line!} (${where})`, ...rest].join('\n');
  return frames.length > 0 ? `${head}\n${frames.join('\n')}` : head;
}
