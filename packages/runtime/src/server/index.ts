// Server entry (HTTP + WebSocket): filled by the transport issue.
export {};
