/**
 * Who may take clips and start or stop recordings (issue 43): the token's `rec` grant
 * (`clip`, `record`; a controller's default is both, any other role's none), and, in
 * single-controller mode, control for a recording (it is the whole session's, so a controller
 * that does not steer may not stop the holder's).
 */
import type { ClipMessage, ErrorMessage, RecordingMessage } from '@reactor/protocol';
import type { ClientHandle } from '@reactor/runtime';
import { ServerErrorCode } from './errors.js';
import { mayRecord, type Grant } from './tokens.js';

/** The refusal of a `clip` or `recording` message for this client, or `undefined` when it may. */
export function recordingRefusal(msg: ClipMessage | RecordingMessage, grant: Grant, handle: ClientHandle | undefined): ErrorMessage | undefined {
  const what = msg.type === 'clip' ? 'clip' : 'record';
  const asked = msg.type === 'clip' ? 'clip' : `recording ${msg.action}`;
  if (!mayRecord(grant, what)) {
    const granted = grant.recording === '*' ? '*' : grant.recording.join(', ') || 'none';
    return grant.role === 'controller'
      ? {
          type: 'error',
          id: msg.id,
          code: ServerErrorCode.RecordingNotGranted,
          message: `${asked}: your token does not grant "${what}" (its rec claim: ${granted}); ask for a token minted with --rec ${what}`,
        }
      : {
          type: 'error',
          id: msg.id,
          code: ServerErrorCode.ForbiddenRole,
          message: `${asked}: your role "${grant.role}" may not ${what === 'clip' ? 'take clips' : 'start or stop recordings'}; it takes a controller's token (or one whose rec claim lists "${what}": reactor token --rec ${what})`,
        };
  }
  if (what === 'record') return handle?.controlError(msg.id, asked);
  return undefined;
}
