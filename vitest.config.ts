import { defineConfig } from 'vitest/config';

// Tests run the TypeScript sources of every workspace package (the `source` export
// condition); child processes (runner ranks, `reactor run`) run the compiled `dist/`,
// which is why `pnpm test` builds first.
export default defineConfig({
  resolve: { conditions: ['source'] },
  ssr: { resolve: { conditions: ['source'] } },
  test: {
    include: ['packages/*/test/**/*.test.ts', 'apps/*/test/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    reporters: ['default'],
  },
});
