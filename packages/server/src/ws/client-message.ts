/**
 * The envelope check of a client's text message lives in `@reactor/protocol` (beside the
 * client's parse of server messages); re-exported here for the server's modules.
 */
export { parseClientMessage, validId, MAX_COMMAND_ID_LENGTH } from '@reactor/protocol';
