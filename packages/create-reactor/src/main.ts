#!/usr/bin/env node
/**
 * `npm create reactor <dir>` (`npx create-reactor <dir>`): writes the project `reactor init <dir>`
 * writes, by calling the same code (`initCommand` of `@reactor/cli`), with the same flags.
 */
import { parseArgs } from 'node:util';
import { CliErrorCode, initCommand } from '@reactor/cli';
import { CodedError } from '@reactor/protocol';

const USAGE = `Usage: npm create reactor <dir> [-- --template <name>] [--gpus <n>] [--name <name>]
       npx create-reactor <dir> [--template <name>] [--gpus <n>] [--name <name>]

Writes a new Reactor app project into <dir> (the project \`reactor init <dir>\` writes).

Options:
  --template <name>  minimal | video | camera | python (default: minimal)
  --gpus <n>         GPUs the app declares in reactor.yaml (default: 1)
  --name <name>      npm package name (default: the folder name)
  -h, --help         this text
`;

/** A command line create-reactor cannot read (code `cli_usage`). */
class UsageError extends CodedError {
  constructor(message: string) {
    super(CliErrorCode.CliUsage, message);
  }
}

async function main(argv: string[]): Promise<void> {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: { template: { type: 'string' }, gpus: { type: 'string' }, name: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
    });
  } catch (err) {
    throw new UsageError(`${(err as Error).message}; run "npx create-reactor --help"`);
  }
  const { values, positionals } = parsed;
  if (values.help) {
    process.stdout.write(USAGE);
    return;
  }
  if (positionals.length !== 1) {
    throw new UsageError(
      positionals.length === 0
        ? 'create-reactor needs a folder: npm create reactor <dir>'
        : `create-reactor takes one folder, got ${positionals.length}: ${positionals.join(' ')}`,
    );
  }
  await initCommand(positionals[0], { template: values.template, gpus: values.gpus, name: values.name });
}

try {
  await main(process.argv.slice(2));
} catch (err) {
  const e = err as Error & { code?: string };
  console.error(`create-reactor: ${e.message}${e.code ? ` [${e.code}]` : ''}`);
  process.exitCode = 1;
}
