/**
 * Wire names: every name a client sees is snake_case (`mainVideo` -> `main_video`,
 * `StateUpdate` -> `state_update`, `HTTPStatus` -> `http_status`).
 */
export function toSnakeCase(name: string): string {
  return name
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .replace(/([A-Z]+)([A-Z][a-z])/g, '$1_$2')
    .replace(/[-\s]+/g, '_')
    .toLowerCase();
}

/** Command names and wire names must look like this. */
export const WIRE_NAME_PATTERN = /^[a-z][a-z0-9_]*$/;
