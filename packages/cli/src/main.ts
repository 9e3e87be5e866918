#!/usr/bin/env node
/**
 * The `reactor` command: `reactor run`, `reactor schema`, `reactor doctor`, `reactor route`, ...
 * Reads `reactor.yaml` (found in the current folder or a parent, or given with --manifest).
 */
import { cac } from 'cac';
import { consoleLogger, levelFromEnv } from '@reactor/log';
import type { CliOptions } from './commands.js';
import { CliErrorCode } from './errors.js';
import type { TypesOptions } from './types-command.js';
import type { DevOptions } from './dev.js';
import type { DeployOptions } from './deploy-command.js';
import type { RouteOptions } from './route-command.js';
import type { TokenOptions } from './token-command.js';
import type { ReplayOptions } from './replay-command.js';

// Progress and log lines go to stderr; stdout carries only results (the viewer URL, the schema, doctor's report).
const toStderr = (...args: unknown[]) => console.error(...args);
const logger = consoleLogger({ name: 'reactor', level: levelFromEnv(), sink: { debug: toStderr, info: toStderr, warn: toStderr, error: toStderr } });

const cli = cac('reactor');
const common = (c: ReturnType<typeof cli.command>) =>
  c
    .option('--manifest <file>', 'reactor.yaml to read (default: ./reactor.yaml or the nearest parent)')
    .option('--config <file>', "the app's config file handed to load() (default: runtime.config)");

common(cli.command('run', 'Load the app and serve it (viewer, WebSocket, /schema, /health, /metrics)'))
  .option('--host <host>', 'interface to bind (default: server.host or 127.0.0.1)')
  .option('--port <port>', 'TCP port (default: server.port or 8080; 0 picks a free one)')
  .option('--token <token>', 'require this access token (also REACTOR_TOKEN)')
  .option('--allowed-host <host>', 'answer to this Host name too (repeatable or comma-separated; * for any; default: server.allowed_hosts)')
  .option('--allowed-origin <origin>', 'let pages of this origin connect (repeatable or comma-separated; * for any; default: server.allowed_origins)')
  .option('--insecure', 'serve on a non-loopback --host without a token (refused otherwise)')
  .option('--agones', 'run as an Agones GameServer: Ready, health pings, Allocated per session (also agones.enabled in reactor.yaml)')
  .action(async (o: CliOptions) => (await import('./commands.js')).runCommand(o, logger));
common(cli.command('replay [log]', "Run a session again from its log (a recording's <name>.session.json), offline, to an MP4"))
  .option('--out <file>', 'the MP4 to write (default: <log>.replay.mp4)')
  .action(async (log: string | undefined, o: ReplayOptions) => (await import('./replay-command.js')).replayCommand(log, o, logger));
common(cli.command('schema', "Print the app's schema (commands, messages, tracks) as JSON")).action(async (o: CliOptions) =>
  (await import('./commands.js')).schemaCommand(o, logger),
);
common(cli.command('doctor', 'Check this machine for the app before loading any weights'))
  .option('--host <host>', 'interface to check')
  .option('--port <port>', 'port to check')
  .action(async (o: CliOptions) => (await import('./commands.js')).doctorCommand(o, logger));
cli
  .command('init [dir]', 'Write a new app project into <dir> (an app under apps/ inside this workspace)')
  .option('--template <name>', 'minimal | video | camera | python (default: minimal)')
  .option('--gpus <n>', 'GPUs the app declares in reactor.yaml (default: 1)')
  .option('--name <name>', 'npm package name (default: the folder name)')
  .action(async (dir: string | undefined, o: { template?: string; gpus?: string; name?: string }) => (await import('./init-command.js')).initCommand(dir, o));
cli
  .command('upgrade [dir]', 'Move a project reactor init wrote (default: this folder) to the framework of this reactor: repack its vendor/')
  .action(async (dir: string | undefined) => (await import('./upgrade-command.js')).upgradeCommand(dir));
cli
  .command('types', "Print the app's client types (for connect<T>() of @reactor/client) as TypeScript")
  .option('--manifest <file>', 'reactor.yaml to read (default: ./reactor.yaml or the nearest parent)')
  .option('--url <server>', "read the schema from a running server's GET /schema instead")
  .option('--token <token>', 'the access token of --url (also REACTOR_TOKEN)')
  .option('--name <TypeName>', 'name of the exported type (default: from the app name, e.g. ReactorVideoTypes)')
  .option('--python', "print the Python worker's TypedDicts instead (its Input and Result, from the app's declarations, and the State)")
  .action(async (o: TypesOptions) => (await import('./types-command.js')).typesCommand(o, logger));
common(cli.command('dev', 'Serve the app, and rebuild (tsc) and restart it on every change under its src/'))
  .option('--host <host>', 'interface to bind (default: server.host or 127.0.0.1)')
  .option('--port <port>', 'TCP port (default: server.port or 8080; 0 picks a free one, kept across restarts)')
  .option('--token <token>', 'require this access token (also REACTOR_TOKEN)')
  .action(async (o: DevOptions) => (await import('./dev.js')).devCommand(o, logger));
cli
  .command('deploy [target]', 'reactor deploy values: print the Helm values (deploy/helm/reactor) that come from reactor.yaml')
  .option('--manifest <file>', 'reactor.yaml to read (default: ./reactor.yaml or the nearest parent)')
  .option('--image-root <dir>', 'where the bundle lies inside the image (default: /opt/reactor)')
  .action(async (target: string | undefined, o: DeployOptions) => (await import('./deploy-command.js')).deployCommand(target, o, logger));
cli
  .command('token', 'Mint a signed session token with the key of REACTOR_AUTH_* or server.auth, and print it')
  .option('--manifest <file>', 'reactor.yaml to read (default: ./reactor.yaml or the nearest parent)')
  .option('--role <role>', "controller (default), spectator, or the app's own role")
  .option('--session <id>', 'the session id or instance name it is for (default *: any)')
  .option('--ttl <duration>', 'lifetime: seconds or 90s, 15m, 1h (default 1h, at most 6h)')
  .option('--not-before <duration>', 'valid only from this long on (default: at once)')
  .option('--publish <tracks>', 'inbound tracks it may publish: comma-separated, * or none (default: * for a controller, none otherwise)')
  .option('--upload-bytes <n>', "bytes it may upload (default: the server's limits for a controller, 0 otherwise)")
  .option(
    '--rec <what>',
    'clips and recordings it may make: clip, record (start and stop), comma-separated, * or none (default: * for a controller, none otherwise)',
  )
  .option('--max-session <duration>', 'the longest its holder may stay in a session, from its arrival (default: no limit)')
  .option('--subject <id>', 'who holds it (the sub claim)')
  .action(async (o: TokenOptions) => (await import('./token-command.js')).tokenCommand(o, logger));
cli
  .command('route', 'Route sessions to a fleet of instances on Kubernetes with Agones (POST /sessions, GET /sessions/:id, /s/:instance/...)')
  .option('--kubeconfig <file>', 'kubeconfig to reach the Kubernetes API (default: in a pod its service account, else $KUBECONFIG or ~/.kube/config)')
  .option('--in-cluster', "use the pod's service account even when a kubeconfig exists")
  .option('--namespace <ns>', "namespace of the fleet (also REACTOR_NAMESPACE; default: the kubeconfig context's, else default)")
  .option('--fleet <name>', 'the Agones Fleet to allocate from (also REACTOR_FLEET; default: reactor)')
  .option('--host <host>', 'interface to bind (also REACTOR_ROUTER_HOST; default 127.0.0.1)')
  .option('--port <port>', 'TCP port (also REACTOR_ROUTER_PORT; default 8090; 0 picks a free one)')
  .option('--token <token>', 'require this access token (also REACTOR_TOKEN); proxied requests carry it on to the instances')
  .option('--allowed-host <host>', 'answer to this Host name too (repeatable or comma-separated; * for any)')
  .option('--allowed-origin <origin>', 'let pages of this origin use the router (repeatable or comma-separated; * for any)')
  .option('--insecure', 'route on a non-loopback --host without a token (refused otherwise)')
  .option('--public-url <url>', "the router's URL as clients reach it, for the instance URLs it answers (default: from each request's Host)")
  .option('--retry-after <s>', 'seconds a 429 (no free instance) asks clients to wait (default 2)')
  .option(
    '--api-key <key>',
    "your backend's key for POST/GET/DELETE /sessions and /metrics (also REACTOR_ROUTER_API_KEY); browsers get instance tokens instead",
  )
  .option('--no-move', 'on an instance that drains, leave its session to run to the drain deadline instead of moving it (apps with snapshots move by default)')
  .option('--queue-max-wait <s>', 'the longest POST /sessions?wait=<s> may ask, seconds (default 120)')
  .option('--queue-max-length <n>', 'most requests waiting at once (default 1000)')
  .option(
    '--instance-token-ttl <s>',
    'lifetime of the instance tokens the router mints with REACTOR_AUTH_SECRET / REACTOR_AUTH_PRIVATE_KEY, seconds (default 600)',
  )
  // Each command's module is loaded on use: `reactor token` needs neither the server nor the
  // Kubernetes client, and `reactor run` never needs the latter.
  .action(async (o: RouteOptions) => (await import('./route-command.js')).routeCommand(o, logger));
cli.help();
cli.version('0.1.0');

/**
 * Flags whose value is text, as typed: cac (mri) turns number-like values into numbers, so
 * `--token ''` arrived as 0 and `--token 0012...` as 12.... Their last occurrence in argv wins.
 */
const TEXT_FLAGS = ['token', 'host', 'manifest', 'config', 'name', 'url', 'namespace', 'fleet'];

/** The text `--<flag> <v>` or `--<flag>=<v>` last gave in `argv`, if any. */
function rawFlag(argv: readonly string[], flag: string): string | undefined {
  let value: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--') break;
    if (a === `--${flag}` && i + 1 < argv.length) value = argv[++i];
    else if (a.startsWith(`--${flag}=`)) value = a.slice(flag.length + 3);
  }
  return value;
}

async function main(): Promise<void> {
  try {
    cli.parse(process.argv, { run: false });
    for (const flag of TEXT_FLAGS) {
      const raw = rawFlag(process.argv.slice(2), flag);
      if (raw !== undefined && flag in cli.options) cli.options[flag] = raw;
    }
    // cac has printed the help or version itself (and unset the matched command): nothing is left to do.
    if (cli.options['help'] === true || (cli.options['version'] === true && cli.matchedCommandName === undefined)) return;
    if (!cli.matchedCommand) {
      if (cli.args.length > 0)
        throw Object.assign(new Error(`unknown command "${String(cli.args[0])}"; run "reactor --help"`), { code: CliErrorCode.CliUsage });
      cli.outputHelp();
      return;
    }
    await cli.runMatchedCommand();
  } catch (err) {
    const e = err as Error & { code?: string };
    // The code ends the first line; a rank's traceback (a Python error's frames) follows it.
    const [first, ...rest] = e.message.split('\n');
    console.error([`reactor: ${first}${e.code ? ` [${e.code}]` : ''}`, ...rest].join('\n'));
    process.exitCode = 1;
  }
}

await main();
