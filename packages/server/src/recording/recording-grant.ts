/**
 * Who may take clips and start or stop recordings (issue 43): the token's `rec` grant
 * (`clip`, `record`; a controller's default is both, any other role's none), and, in
 * single-controller mode, control for a recording (it is the whole session's, so a controller
 * that does not steer may not stop the holder's). The same grants open the HTTP doors: the clip
 * files (`clip`), the recordings listing and files (`record`).
 */
import type { ClipMessage, ErrorMessage, RecordingMessage } from '@reactor/protocol';
import type { ClientHandle } from '@reactor/runtime';
import { ServerErrorCode } from '../base/errors.js';
import { mayRecord, type Grant } from '@reactor/access';

/**
 * Why `grant` may not `what` (take clips / start or stop recordings; `asked` names the request
 * in the message), or `undefined` when it may: `forbidden_role` for a role other than
 * controller, `recording_not_granted` for a controller whose `rec` claim leaves it out. The same
 * answer on the socket (an `error`) and on the HTTP doors (403).
 */
function grantRefusal(grant: Grant, what: 'clip' | 'record', asked: string): { code: ServerErrorCode; message: string } | undefined {
  if (mayRecord(grant, what)) return undefined;
  const granted = grant.recording === '*' ? '*' : grant.recording.join(', ') || 'none';
  return grant.role === 'controller'
    ? {
        code: ServerErrorCode.RecordingNotGranted,
        message: `${asked}: your token does not grant "${what}" (its rec claim: ${granted}); ask for a token minted with --rec ${what}`,
      }
    : {
        code: ServerErrorCode.ForbiddenRole,
        message: `${asked}: your role "${grant.role}" may not ${what === 'clip' ? 'take clips' : 'start or stop recordings'}; it takes a controller's token (or one whose rec claim lists "${what}": reactor token --rec ${what})`,
      };
}

/** The refusal of a `clip` or `recording` message for this client, or `undefined` when it may. */
export function recordingRefusal(msg: ClipMessage | RecordingMessage, grant: Grant, handle: ClientHandle | undefined): ErrorMessage | undefined {
  const asked = msg.type === 'clip' ? 'clip' : `recording ${msg.action}`;
  const refused = grantRefusal(grant, msg.type === 'clip' ? 'clip' : 'record', asked);
  if (refused) return { type: 'error', id: msg.id, ...refused };
  return msg.type === 'recording' ? handle?.controlError(msg.id, asked) : undefined;
}

/**
 * The refusal of an HTTP door of clips and recordings (`GET /clips/<id>.mp4` takes the `clip`
 * grant; `GET /recordings` and `GET /recordings/<name>` the `record` grant), or `undefined`.
 */
export function recordingFileRefusal(pathname: string, grant: Grant): { code: ServerErrorCode; message: string } | undefined {
  const clip = pathname.startsWith('/clips');
  return grantRefusal(grant, clip ? 'clip' : 'record', `GET ${clip ? '/clips/...' : pathname === '/recordings' ? '/recordings' : '/recordings/...'}`);
}
