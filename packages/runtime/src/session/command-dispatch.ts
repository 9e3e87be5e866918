/**
 * Command dispatch: one command of one client, checked (name, role, session, params), with its
 * upload references resolved to stored files, run under the step lock in arrival order. The
 * answer is returned to the caller (`ClientHandle.command`), never also written to the sink.
 */
import { type CommandMessage, type ErrorMessage, type ReplyMessage, type SessionStatus, WireErrorCode } from '@reactor/protocol';
import type { CommandSpec } from '../app/command-specs.js';
import { CommandError } from '../errors/errors.js';
import { truncateCodePoints, unknownKey } from '../state/field-errors.js';
import type { FieldSpec } from '../state/field-set.js';
import { mimeMatches } from '../upload/sniff.js';
import type { UploadedFile } from '../upload/uploaded-file.js';
import { UnresolvedUpload } from '../upload/upload-store.js';
import { errorReply, invalidParams } from './answers.js';
import type { Client } from './client.js';
import type { Control } from './control.js';
import type { HostClient, HostSession } from './host-client.js';
import type { HostCore } from './host-core.js';
import type { HostUploads } from './host-uploads.js';
import type { Snapshots } from './snapshots.js';

/** What `execute()` answers for a command of a session frozen for a move: it waits for the freeze to end. */
const HELD = Symbol('held');
type Answer = ReplyMessage | ErrorMessage | typeof HELD;

/** Runs the commands of a host's clients. */
export class CommandDispatch {
  constructor(
    private readonly core: HostCore,
    private readonly control: Control,
    private readonly uploads: HostUploads,
    /** The host's status now (a `no_session` answer says when the app is still loading). */
    private readonly status: () => SessionStatus,
    /** Sends the session's state to its clients (a setter changed it). */
    private readonly broadcastState: () => void,
    /** Drops the session's queued frames and tells clients to cut (an urgent change). */
    private readonly flush: () => void = () => {},
    /** The built-in `rewind` (an app with snapshots). */
    private readonly snapshots?: Snapshots,
  ) {}

  /** A generated setter (`set_<field>`): it runs with steps in flight. */
  private isSetter(msg: CommandMessage): boolean {
    return typeof msg?.name === 'string' && this.core.def.commands.get(msg.name)?.kind === 'setter';
  }

  /**
   * An urgent command (a setter of an `@InputField({ urgent: true })` field, or an
   * `@event({ urgent: true })`, issue 39), before it queues for the lock: it aborts the running
   * step's restart switch (every call in flight, with `inFlight` > 1), at most once a chunk
   * (until a step completes); true when granted (its change then drops the frames queued from
   * before it). A later one in the same chunk is an ordinary command (counted, said once a
   * session). A command its client may not send (its role, single-controller control) or sent
   * outside the session is never granted: it restarts nothing.
   */
  private urgentGrant(client: HostClient, msg: CommandMessage, id: string): boolean {
    const spec = typeof msg?.name === 'string' ? this.core.def.commands.get(msg.name) : undefined;
    const session = this.core.session;
    if (!spec?.urgent || this.core.app.urgent === false || !session || session.over) return false;
    if (client.session !== session || !client.lifecycle.is('joining', 'joined')) return false;
    if (this.control.roleError(client, id, spec.roles, `command ${spec.name}`)) return false;
    const what = spec.kind === 'setter' ? `change of ${spec.field!.property}` : `command ${spec.name}`;
    if (!session.urgentReady) {
      this.core.counters.urgentRateLimited++;
      if (!this.limitedSaid.has(session)) {
        this.limitedSaid.add(session);
        this.core.logger.info(
          `urgent ${what} rate-limited (urgent_rate_limited): the chunk was restarted already; it applies at the next chunk (at most one restart a chunk)`,
        );
      }
      return false;
    }
    session.urgentReady = false;
    session.urgentPending++;
    const restart = session.urgentRestart;
    if (restart && !restart.signal.aborted) restart.abort(new Error(`an urgent ${what} supersedes this chunk`));
    return true;
  }

  /** Sessions told about a rate-limited urgent change already. */
  private readonly limitedSaid = new WeakSet<HostSession>();

  /**
   * Runs one command for `client` under the lock; the answer is returned (the caller sends it).
   * A command of a session frozen for a move (docs/snapshots.md "Move") is held: it runs once
   * the freeze thaws (the move failed), or is answered `no_session` when the session ends frozen
   * (it moved: the client sends it again on the new instance).
   */
  async dispatch(client: HostClient, msg: CommandMessage): Promise<ReplyMessage | ErrorMessage> {
    const id = typeof msg?.id === 'string' ? msg.id : '';
    for (;;) {
      const answer = await this.dispatchOnce(client, msg, id);
      if (answer !== HELD) return answer;
      if (!(await this.snapshots!.whenThawed()))
        return errorReply(id, WireErrorCode.NoSession, 'the session moved to another instance before this command applied here; send it there');
    }
  }

  private async dispatchOnce(client: HostClient, msg: CommandMessage, id: string): Promise<Answer> {
    let answer: Answer;
    try {
      const refs = this.uploadRefs(client, msg);
      // A command the client's role may not send is refused at once, not after a wait for the bytes of its uploads.
      const refused = refs.length > 0 ? this.roleRefusal(client, msg, id) : undefined;
      if (refused) {
        this.core.counters.commands++;
        answer = refused;
      } else if (refs.length === 0 && client.uploadChain === undefined) {
        const urgent = this.urgentGrant(client, msg, id);
        const session = this.core.session;
        answer = await this.core.task(
          async () => {
            if (urgent && session) session.urgentPending--;
            const flushes = session?.flushes ?? 0;
            const a = await this.execute(client, msg, id);
            // The frames still queued show the old value: dropped, as this.output.flush() drops
            // them (an event whose handler flushed them itself is not flushed twice).
            if (urgent && a !== HELD && a.type === 'reply' && session?.flushes === flushes) this.flush();
            return a;
          },
          // A setter changes what the next processInput() reads: steps in flight go on meanwhile.
          // Anything else drains them first; a granted urgent event has aborted their restart
          // switch already, so the drain drops them unprocessed (StepPipeline.completeOldest).
          this.isSetter(msg) ? 'none' : 'drain',
        );
      } else {
        // Upload references are resolved outside the lock (a wait for bytes must not hold the
        // step loop), and the client's later commands queue behind this one: arrival order holds.
        const run = (client.uploadChain ?? Promise.resolve()).then(async () => {
          const resolved = await this.resolveUploads(client, refs, id);
          if (!(resolved instanceof Map)) return resolved;
          return this.core.task(() => this.execute(client, msg, id, resolved));
        });
        const chain = run.catch(() => undefined);
        client.uploadChain = chain;
        void chain.then(() => {
          if (client.uploadChain === chain) client.uploadChain = undefined;
        });
        answer = await run;
      }
    } catch (err) {
      this.core.logger.error({ err }, 'command dispatch failed');
      answer = errorReply(id, WireErrorCode.InternalError, 'the command failed inside the server; the server log has the details');
    }
    if (answer === HELD) return answer;
    if (answer.type === 'error') this.core.counters.commandErrors++;
    this.core.notifyChange();
    return answer;
  }

  private async execute(client: HostClient, msg: CommandMessage, id: string, uploads?: Map<string, UploadedFile>): Promise<Answer> {
    const { def } = this.core;
    const name = msg?.name;
    const frozenSession = this.core.session;
    // A session frozen for a move applies nothing until the freeze ends (checked under the lock, as the snapshot was taken).
    if (frozenSession && this.snapshots?.frozen(frozenSession) && client.session === frozenSession) return HELD;
    this.core.counters.commands++;
    const spec = typeof name === 'string' ? def.commands.get(name) : undefined;
    if (!spec) {
      const shown = typeof name === 'string' ? truncateCodePoints(name) : name;
      return errorReply(
        id,
        WireErrorCode.UnknownCommand,
        `unknown command ${JSON.stringify(shown)}; this app has: ${[...def.commands.keys()].join(', ') || '(none)'}`,
      );
    }
    const refused = this.control.roleError(client, id, spec.roles, `command ${spec.name}`);
    if (refused) return refused;
    const session = this.core.session;
    if (!client.lifecycle.is('joining', 'joined') || !session || session.over || client.session !== session) {
      return errorReply(
        id,
        WireErrorCode.NoSession,
        `no session is running${this.status().state === 'loading' ? ' yet: the app is still loading' : ''}; try again once the session status is streaming`,
      );
    }
    // Absent params mean none; `null` is not absent (the docs say an object or nothing) and is refused below.
    let params = msg.params === undefined ? {} : msg.params;
    if (typeof params !== 'object' || params === null || Array.isArray(params)) {
      return {
        type: 'error',
        id,
        code: WireErrorCode.InvalidParams,
        message: 'params must be a JSON object',
        details: [{ field: 'params', constraint: 'isObject', message: 'params must be an object' }],
      };
    }
    if (uploads && uploads.size > 0) params = { ...params, ...Object.fromEntries(uploads) };
    if (spec.builtin === 'rewind' && this.snapshots) return this.snapshots.rewind(client, session, params as Record<string, unknown>, id);
    return spec.kind === 'setter' ? this.runSetter(spec, client, session, params, id) : this.runEvent(spec, client, session, params, id);
  }

  private async runSetter(
    spec: CommandSpec,
    client: HostClient,
    session: HostSession,
    params: Record<string, unknown>,
    id: string,
  ): Promise<ReplyMessage | ErrorMessage> {
    const field = spec.field!;
    const details = Object.keys(params)
      .filter((k) => k !== field.wire)
      .map(unknownKey);
    if (!Object.prototype.hasOwnProperty.call(params, field.wire)) {
      details.push({ field: field.wire, constraint: 'required', message: `${field.wire} is required` });
    } else {
      details.push(...(await this.core.def.state.validateField(field, params[field.wire])));
    }
    if (details.length > 0) return invalidParams(id, spec.name, details);
    (session.state as unknown as Record<string, unknown>)[field.property] = params[field.wire];
    session.acks.changed({ client, id, key: `field:${field.property}` });
    this.snapshots?.logCommand(session, spec.name, params);
    this.broadcastState();
    return { type: 'reply', id };
  }

  /**
   * An event that succeeds counts as a change of state for its `applied` message: the host cannot
   * see what its handler changed (the app's own fields, the runner), so the next step's frame is
   * the first that can show it.
   */
  private async runEvent(
    spec: CommandSpec,
    client: HostClient,
    session: HostSession,
    params: Record<string, unknown>,
    id: string,
  ): Promise<ReplyMessage | ErrorMessage> {
    const { app, def, logger } = this.core;
    let value: object = {};
    if (spec.params) {
      const v = await spec.params.validatePayload(params);
      if (!v.ok) return invalidParams(id, spec.name, v.errors);
      value = v.value;
    } else {
      const extra = Object.keys(params);
      if (extra.length > 0) return invalidParams(id, spec.name, extra.map(unknownKey));
    }
    try {
      const handler = (app as unknown as Record<string, (p: object, c: Client) => unknown>)[spec.method!]!;
      const result = await handler.call(app, value, client);
      session.acks.changed({ client, id, key: `event:${spec.name}` });
      this.snapshots?.logCommand(session, spec.name, value as Record<string, unknown>);
      return result === undefined ? { type: 'reply', id } : { type: 'reply', id, result };
    } catch (err) {
      if (err instanceof CommandError) return errorReply(id, err.code, err.message);
      logger.error({ err }, `command ${spec.name} (${def.appClass.name}.${spec.method}) threw`);
      return errorReply(id, WireErrorCode.InternalError, `command ${spec.name} failed inside the app; the server log has the details`);
    }
  }

  /** The role refusal (`forbidden_role`, `not_controller`) of a known command, checked before its uploads are waited for. */
  private roleRefusal(client: HostClient, msg: CommandMessage, id: string): ErrorMessage | undefined {
    const spec = this.core.def.commands.get(msg.name);
    return spec ? this.control.roleError(client, id, spec.roles, `command ${spec.name}`) : undefined;
  }

  // ---- upload references ----------------------------------------------------------------------

  /**
   * The well-formed upload references (`{"uploadId": "<string>"}`) in a command for a session
   * this client is in; anything else is left to validation (`invalid_params`) or to the checks
   * `execute()` makes first (`unknown_command`, `no_session`).
   */
  private uploadRefs(client: HostClient, msg: CommandMessage): Array<{ field: FieldSpec; uploadId: string }> {
    const fields = this.uploads.uploadFieldsOf(msg?.name);
    const params = msg?.params;
    if (fields.length === 0 || typeof params !== 'object' || params === null || Array.isArray(params)) return [];
    if (!client.session || client.session.over) return [];
    const refs: Array<{ field: FieldSpec; uploadId: string }> = [];
    for (const field of fields) {
      const v = (params as Record<string, unknown>)[field.wire];
      if (typeof v !== 'object' || v === null || Array.isArray(v)) continue;
      const keys = Object.keys(v);
      const uploadId = (v as Record<string, unknown>).uploadId;
      if (keys.length === 1 && typeof uploadId === 'string') refs.push({ field, uploadId });
    }
    return refs;
  }

  /**
   * Resolves each reference to its stored file (waiting up to `resolveWaitMs` for bytes still
   * arriving) and checks it against its field: the files by wire name, or the error answer
   * (`unresolved_upload`, `upload_rejected`).
   */
  private async resolveUploads(
    client: HostClient,
    refs: ReadonlyArray<{ field: FieldSpec; uploadId: string }>,
    id: string,
  ): Promise<Map<string, UploadedFile> | ErrorMessage> {
    const files = new Map<string, UploadedFile>();
    const session = client.session;
    if (!session || session.over) return files; // execute() answers no_session
    const waitMs = this.uploads.resolveWaitMs;
    const results = await Promise.all(
      refs.map(async ({ field, uploadId }) => {
        try {
          if (!session.uploads)
            throw new UnresolvedUpload(
              `no upload ${JSON.stringify(uploadId.slice(0, 64))} in this session: upload the file first (POST /uploads, then PUT its bytes)`,
            );
          return { field, file: await session.uploads.resolve(uploadId, waitMs) };
        } catch (err) {
          return { field, error: (err as Error).message };
        }
      }),
    );
    for (const r of results) {
      if (r.error !== undefined) return errorReply(id, WireErrorCode.UnresolvedUpload, `${r.field.wire}: ${r.error}`);
      const { field, file } = r as { field: FieldSpec; file: UploadedFile };
      const { maxBytes, mimeTypes } = field.upload!;
      if (maxBytes !== undefined && file.size > maxBytes) {
        return errorReply(
          id,
          WireErrorCode.UploadRejected,
          `${field.wire} takes files of at most ${maxBytes} bytes; upload ${JSON.stringify(truncateCodePoints(file.name))} has ${file.size}`,
        );
      }
      if (mimeTypes !== undefined && !mimeMatches(file.mimeType, mimeTypes)) {
        return errorReply(
          id,
          WireErrorCode.UploadRejected,
          `${field.wire} takes ${mimeTypes.join(', ')}; upload ${JSON.stringify(truncateCodePoints(file.name))} is ${file.mimeType}`,
        );
      }
      files.set(field.wire, file);
    }
    return files;
  }
}
