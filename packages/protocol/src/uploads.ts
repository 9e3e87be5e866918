/** The HTTP upload exchange: a command's reference to a file, and the `/uploads` bodies. */

/** Path prefix of an upload's `PUT` URL. */
export const UPLOAD_PATH = '/uploads/';

/**
 * A command parameter (or state field) of upload type carries a reference to a file uploaded
 * over HTTP (`POST /uploads`, then `PUT /uploads/{uploadId}`): `{"image": {"uploadId": "..."}}`.
 */
export interface UploadRef {
  uploadId: string;
}

/** `POST /uploads` body: announces a file; the answer (201) is an {@link UploadTicket}. */
export interface UploadRequest {
  /** The file's name, for display only (never used as a path). At most 255 characters. */
  name: string;
  /** Exact byte size of the body the `PUT` will carry. */
  size: number;
  /** What the client believes the type is; the server checks the bytes and keeps what they are. */
  mimeType?: string;
  /** The uploading client's `clientId` (from `welcome`), so the app's `@fileUploaded` hook knows who sent it. */
  clientId?: string;
  /**
   * The command the file is for (wire name): the server holds it to that command's upload
   * field (`x-reactor-upload` `maxBytes`, `mimeTypes`) before and while the bytes stream.
   * Without it, to what the app's upload fields take together.
   */
  command?: string;
  /** The command's upload parameter the file is for, when it has several (needs `command`). */
  field?: string;
}

/** `POST /uploads` answer (201). */
export interface UploadTicket {
  uploadId: string;
  /** Where to `PUT` the bytes (a path on the same server). */
  url: string;
  /** Milliseconds from now after which an upload that was not written is forgotten. */
  expiresInMs: number;
}

/** `PUT /uploads/{uploadId}` answer (200): the stored file. */
export interface UploadInfo {
  uploadId: string;
  name: string;
  /** The type found in the bytes (magic numbers), not the client's claim. */
  mimeType: string;
  size: number;
}
