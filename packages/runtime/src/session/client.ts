/**
 * A connected client, as app code sees it (`@connected(client)`, event handlers).
 * @typeParam Message the message classes `send()` accepts (type it as the app's: `Client<Notice>`).
 */
export interface Client<Message extends object = object> {
  /** Unique per host. */
  readonly id: string;
  /** What the transport knows about it (remote address, user agent). */
  readonly info: { readonly remoteAddress?: string; readonly userAgent?: string };
  /** Its role, from its token: `controller`, `spectator`, or the app's own (`controller` without a token). */
  readonly role: string;
  /**
   * Sends a declared message to this client only (no-op once it has left).
   * @throws MessageNotDeclaredError (`message_not_declared`) for a class not in `@reactorApp({ messages })`.
   */
  send(message: Message): void;
}
