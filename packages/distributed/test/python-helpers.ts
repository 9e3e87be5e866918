import { fileURLToPath } from 'node:url';

/** The Python of the Python-rank tests: REACTOR_PYTHON, else Debian's (the one with NumPy and torch). */
export const PY = process.env.REACTOR_PYTHON ?? '/usr/bin/python3';
/** Folder of the Python fixture workers. */
export const FIXTURES = fileURLToPath(new URL('./fixtures/python/', import.meta.url));
