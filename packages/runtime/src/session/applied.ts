/**
 * Applied-at acknowledgements (issue 26): for each command that changed state, which frame first
 * reflects it, told to its sender as one `applied` message.
 *
 * A command runs under the step lock, between steps; the next step's `processInput` is the first
 * read of what it changed. Its change waits here (`waiting`) until a step produces at least one
 * slot on the ack track (the first outbound video track; without video, the first audio track):
 * the waiting commands are then attached to that step's first slot on the track, and named with
 * the `seq` playout gives it ({@link AppliedAcks.played}). A step with no slot there (no output,
 * or frames of other tracks only) leaves them waiting for the next one.
 *
 * A model whose output lags its input (a pipelined worker returns the previous call's frames)
 * says so per output (`Output.inputStep`, the `StepOutcome.step` whose input the frames show):
 * a command waits for the first output that shows the step that first read it, not for the
 * first output after it ran.
 *
 * Outcomes other than `applied`, decided here:
 * - `superseded`: a later command on the same key (the same state field, or the same event) ran
 *   while this one was still waiting (no slot made of it yet);
 * - `paused`: a step that read it was refused (the app's `ApplicationError`, an input track with
 *   no frame): told at once, not held until steps run again (a step that only gave way to a
 *   command does not count);
 * - `ended`: the session ended first.
 * Slots dropped before they played (a flush, the session's end) give their commands back: they
 * wait for the next step's slot (or are superseded by a newer one waiting on their key).
 *
 * Generic in the client type, so this module does not import the host's client.
 */
import type { AppliedMessage } from '@reactor/protocol';

/** One command whose change waits for a frame. */
export interface PendingApplied<C> {
  /** The client that sent it (it alone is told). */
  readonly client: C;
  /** The command's id. */
  readonly id: string;
  /** What it changed: `field:<property>` for a setter, `event:<wire name>` for an event. */
  readonly key: string;
}

/** A waiting command and the step that first reads its change. */
interface Waiting<C> extends PendingApplied<C> {
  readonly readBy: number;
}

/** The acknowledgements of one session. */
export class AppliedAcks<C> {
  /** Commands no slot has been made of yet, oldest first. */
  #waiting: Array<Waiting<C>> = [];
  #ended = false;

  /**
   * @param track the ack track's name (undefined: the app has no outbound track; commands wait until superseded or the session ends).
   * @param send tells `client` its command's outcome (a client that left is skipped there).
   * @param nextStep the number of the session's next step (the one that first reads a change made now).
   */
  constructor(
    readonly track: string | undefined,
    private readonly send: (client: C, msg: AppliedMessage) => void,
    private readonly nextStep: () => number = () => 0,
  ) {}

  /** Commands waiting for a slot (for tests and status). */
  get waiting(): number {
    return this.#waiting.length;
  }

  /** A command changed state (under the step lock): it supersedes a waiting one on the same key. */
  changed(ack: PendingApplied<C>): void {
    if (this.#ended) return this.#settle(ack, 'ended');
    const kept: Array<Waiting<C>> = [];
    for (const w of this.#waiting) {
      if (w.key === ack.key) this.#settle(w, 'superseded');
      else kept.push(w);
    }
    kept.push({ ...ack, readBy: this.nextStep() });
    this.#waiting = kept;
  }

  /**
   * A step made a slot on the ack track showing the input of step `shows` (default: every
   * waiting command): the commands read by that step or earlier go with it (undefined when none).
   */
  take(shows = Infinity): ReadonlyArray<PendingApplied<C>> | undefined {
    if (this.#waiting.length === 0 || this.track === undefined) return undefined;
    const taken = this.#waiting.filter((w) => w.readBy <= shows);
    if (taken.length === 0) return undefined;
    this.#waiting = this.#waiting.filter((w) => w.readBy > shows);
    return taken;
  }

  /** The slot that carries `acks` played out; its first frame (or audio chunk) got `seq`. */
  played(acks: ReadonlyArray<PendingApplied<C>>, seq: number): void {
    for (const a of acks) this.send(a.client, { type: 'applied', id: a.id, outcome: 'applied', seq, track: this.track! });
  }

  /**
   * Slots that carried `acks` were dropped before they played (a flush, the session's end): the
   * commands wait again, ahead of the ones waiting now (they are older); one whose key a newer
   * waiting command holds is superseded.
   */
  returned(acks: ReadonlyArray<PendingApplied<C>>): void {
    if (acks.length === 0) return;
    const newer = new Set(this.#waiting.map((w) => w.key));
    const back: Array<Waiting<C>> = [];
    // Among the returned ones too, the latest on a key wins.
    for (let i = acks.length - 1; i >= 0; i--) {
      const a = acks[i]!;
      if (newer.has(a.key)) this.#settle(a, 'superseded');
      else {
        newer.add(a.key);
        back.unshift({ ...a, readBy: (a as Partial<Waiting<C>>).readBy ?? 0 });
      }
    }
    this.#waiting = [...back, ...this.#waiting];
    if (this.#ended) this.end();
  }

  /**
   * A rewind restored an older state: the waiting commands' changes are gone with it (told
   * `superseded`), as are those a flush gave back.
   */
  rewound(): void {
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const w of waiting) this.#settle(w, 'superseded');
  }

  /** A step was refused: what it read will not show until steps run again; every waiting command is told `paused`. */
  refused(): void {
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const w of waiting) this.#settle(w, 'paused');
  }

  /** The session ended: every waiting command is told `ended`; later ones are told at once. */
  end(): void {
    this.#ended = true;
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const w of waiting) this.#settle(w, 'ended');
  }

  #settle(ack: PendingApplied<C>, outcome: 'superseded' | 'paused' | 'ended'): void {
    this.send(ack.client, { type: 'applied', id: ack.id, outcome });
  }
}
