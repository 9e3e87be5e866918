/**
 * The wire protocol lives in `@reactor/protocol` (types, parsers, frame codec, code lists);
 * this package's modules take it from here, and `index.ts` re-exports the same names as before.
 */
export * from '@reactor/protocol';
