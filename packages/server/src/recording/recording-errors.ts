/** The errors of the recording service: the answer of a server that records nothing, and the coded failure its calls throw. */
import type { ClipMessage, ErrorMessage, RecordingMessage } from '@reactor/protocol';
import { ReactorError } from '@reactor/runtime';
import { ServerErrorCode } from '../base/errors.js';

/** The answer to `clip`/`recording` on a server without `options.recording`. */
export function recordingDisabled(msg: ClipMessage | RecordingMessage): ErrorMessage {
  return msg.type === 'clip'
    ? {
        type: 'error',
        id: msg.id,
        code: ServerErrorCode.ClipsDisabled,
        message: 'this server keeps no clip ring; add a `recording:` section to reactor.yaml (or `recording` to serve() options) to take clips',
      }
    : {
        type: 'error',
        id: msg.id,
        code: ServerErrorCode.RecordingDisabled,
        message: 'this server records nothing; add a `recording:` section to reactor.yaml (or `recording` to serve() options) to record sessions',
      };
}

/** A failure with a wire code (answered as `error`, thrown to app code as `ReactorError`). */
export function fail(code: ServerErrorCode, message: string): ReactorError {
  return new ReactorError(code, message);
}
