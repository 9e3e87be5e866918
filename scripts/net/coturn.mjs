// A real coturn (Debian `coturn`: `turnserver`) for tests and benchmarks: command line only
// (`-n`: no config file), one static long-term-credential user or, with `authSecret`, the TURN
// REST API (`--use-auth-secret`: time-limited credentials minted from a shared secret), plain UDP/TCP listeners (no
// TLS/DTLS), its SQLite database in a temp dir that `stop()` removes. Started with `spawn`, it
// runs where the caller says: pass an impaired link's `spawn` to run it inside a namespace.
import { spawn as spawnChild } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * Starts turnserver listening (and relaying) on `ip`:`port` (UDP and TCP); resolves once its log
 * says the listeners are up. `spawn(command, args, options)` defaults to a plain child process.
 * `realm`, `user`, `password`: the credential it accepts (`urls` is the `turn:` URL for an ICE
 * server entry; `urlsTcp` the same over TCP). `authSecret`: take credentials minted from this
 * secret instead (`--use-auth-secret --static-auth-secret`; username `<expiry>:<id>`, credential
 * base64(HMAC-SHA1(secret, username))): no static user then.
 */
export async function startCoturn({
  ip,
  port = 3478,
  user = 'reactor',
  password = 'reactor-test',
  realm = 'reactor.test',
  minPort = 49152,
  maxPort = 49252,
  authSecret,
  spawn = spawnChild,
}) {
  const dir = mkdtempSync(join(tmpdir(), 'reactor-coturn-'));
  const args = [
    '-n',
    '--no-cli',
    '--listening-ip',
    ip,
    '--listening-port',
    String(port),
    '--relay-ip',
    ip,
    '--min-port',
    String(minPort),
    '--max-port',
    String(maxPort),
    ...(authSecret === undefined ? ['--lt-cred-mech', '--user', `${user}:${password}`] : ['--use-auth-secret', `--static-auth-secret=${authSecret}`]),
    '--fingerprint',
    '--realm',
    realm,
    '--no-tls',
    '--no-dtls',
    '--db',
    join(dir, 'turndb'),
    '--pidfile',
    join(dir, 'turnserver.pid'),
    '--log-file',
    'stdout',
    '--simple-log',
    ...(ip.startsWith('127.') ? ['--allow-loopback-peers'] : []),
  ];
  const child = spawn('turnserver', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  child.stdout.on('data', (d) => (log += d));
  child.stderr.on('data', (d) => (log += d));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 2000);
      await exited;
      clearTimeout(t);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await new Promise((res, rej) => {
      const timer = setTimeout(() => rej(new Error(`turnserver did not start in 10 s:\n${log}`)), 10_000);
      const check = () => {
        if (/Total General servers/.test(log)) {
          clearTimeout(timer);
          res();
        }
      };
      child.stdout.on('data', check);
      child.once('error', (e) => {
        clearTimeout(timer);
        rej(new Error(`cannot start turnserver (${e.message}); Debian: apt-get install coturn`));
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        rej(new Error(`turnserver exited with ${code}:\n${log}`));
      });
    });
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    child,
    urls: `turn:${ip}:${port}?transport=udp`,
    urlsTcp: `turn:${ip}:${port}?transport=tcp`,
    username: user,
    credential: password,
    log: () => log,
    stop,
  };
}
