/**
 * The relay of `/s/{instance}/...` to an instance's pod: HTTP requests through a keep-alive
 * agent, WebSocket upgrades byte for byte with the router's own pings, and a per-instance circuit
 * breaker (an instance that failed a relayed connection or ping lately is given to nobody and
 * its relays answer `instance_unreachable` at once).
 */
import { Agent, request as httpRequest, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import { connect as netConnect, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Logger } from '@reactor/log';
import { safeDecode, writeHttpError } from '@reactor/access';
import { asRouterError, sendRouterError } from './answers.js';
import { RouterError, RouterErrorCode } from './errors.js';
import type { RouterMetrics } from './metrics.js';
import type { ResolvedRouterOptions } from './options.js';
import type { AgonesRegistry, Instance } from './registry.js';
import { FrameBoundaries, RouterCloseCode, acceptAndClose, clientPingFrame, headEnd, serverCloseFrame } from './ws-relay.js';

/** The header that carries the router's session id to the instance: its session takes that id (one id end to end). */
export const SESSION_ID_HEADER = 'x-reactor-session-id';

/** Headers a proxy must not pass on (RFC 9110 section 7.6.1), plus the ones the router sets itself. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
  'origin',
]);
/** How long an instance whose relayed connection ended without a close frame has to answer `/health/live` before its sessions count as lost, ms. */
const LIVENESS_CHECK_MS = 1500;
/** The longest answer head to an upgrade the relay holds (the instance's is a few hundred bytes). */
const MAX_RESPONSE_HEAD = 16 * 1024;
/** A GameServer name: a Kubernetes object name. */
const INSTANCE_NAME = /^[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?$/;

/** What the relay needs from the router. */
export interface RelayContext {
  options: ResolvedRouterOptions;
  metrics: RouterMetrics;
  log: Logger;
  registry: AgonesRegistry;
  /** The router's URL as the client reached it. */
  publicBase(req: IncomingMessage): string;
}

/** The relayed requests and sockets of one router, and its circuit breaker. */
export class InstanceRelay {
  readonly #c: RelayContext;
  readonly #agent = new Agent({ keepAlive: true, maxSockets: 256 });
  readonly #relays = new Set<Duplex>();
  /** The relayed sockets of each instance, by the function that cuts one (when the instance is found gone). */
  readonly #relaysTo = new Map<string, Set<(why: string, close?: { code: number; reason: string }) => void>>();
  /** Instances whose relayed connection ended without a close frame, being checked (do they still accept connections?): the relays' end functions. */
  readonly #probing = new Map<string, Array<() => void>>();
  /** Instances that failed a relayed connection or ping lately: name -> until when (`performance.now()`) and why. */
  readonly #breaker = new Map<string, { until: number; why: string; address: string }>();

  constructor(c: RelayContext) {
    this.#c = c;
  }

  /** Cuts every relayed socket and the agent's connections (the router is closing). */
  close(): void {
    for (const s of this.#relays) s.destroy();
    this.#agent.destroy();
  }

  /** The breaker's entry for an instance while its circuit is open (it failed lately at the same address), else undefined. */
  openCircuit(instance: Instance): { why: string } | undefined {
    const e = this.#breaker.get(instance.name);
    if (!e) return undefined;
    if (performance.now() > e.until || e.address !== `${instance.address}:${instance.port}`) {
      this.#breaker.delete(instance.name);
      return undefined;
    }
    return e;
  }

  /**
   * The instance failed: its circuit opens (for `breakerOpenMs` it is given to nobody and its
   * relays answer `instance_unreachable` at once), and every socket relayed to it is cut with 4502.
   */
  trip(instance: Instance, why: string): void {
    this.#trip(instance, why);
  }

  #trip(instance: Instance, why: string): void {
    if (this.#c.options.breakerOpenMs > 0) {
      if (!this.#breaker.has(instance.name)) this.#c.metrics.breakerTrips.inc();
      this.#breaker.set(instance.name, { until: performance.now() + this.#c.options.breakerOpenMs, why, address: `${instance.address}:${instance.port}` });
    }
    // Every socket still relayed to it goes the same way: its viewers are told now, not when TCP gives up.
    for (const cut of this.#relaysTo.get(instance.name) ?? []) cut(why);
  }

  /** Cuts every socket relayed to an instance (its viewers get `instance_unreachable` with `why`). */
  cutRelays(name: string, why: string): void {
    for (const cut of this.#relaysTo.get(name) ?? []) cut(why);
  }

  /** Closes every socket relayed to an instance with `code` and `reason` (a moved session: 4307, where to reconnect). */
  closeRelays(name: string, code: number, reason: string): void {
    for (const cut of this.#relaysTo.get(name) ?? []) cut(reason, { code, reason });
  }

  /** A relay's success closes the instance's circuit. */
  #reset(instance: Instance): void {
    this.#breaker.delete(instance.name);
  }

  /** The instance a `/s/{instance}/...` path names, if it holds a session. */
  async target(path: string): Promise<{ instance: Instance; rest: string }> {
    const m = /^\/s\/([^/]+)(\/.*)?$/.exec(path);
    const name = m ? safeDecode(m[1]!) : undefined;
    if (!m || name === undefined || !INSTANCE_NAME.test(name)) {
      throw new RouterError(
        RouterErrorCode.UnknownInstance,
        `${JSON.stringify(path)} names no instance: the path is /s/{instance}/..., with the instance of POST /sessions`,
      );
    }
    const instance = await this.#c.registry.getInstance(name);
    if (!instance || instance.state !== 'Allocated' || !instance.address || !instance.port) {
      throw new RouterError(
        RouterErrorCode.UnknownInstance,
        `no instance "${name}" holds a session in fleet "${this.#c.options.fleet}"${instance ? ` (it is ${instance.state})` : ''}: its session ended, or it never had one; start a new one with POST /sessions`,
      );
    }
    const open = this.openCircuit(instance);
    if (open) {
      throw new RouterError(
        RouterErrorCode.InstanceUnreachable,
        `instance ${name} does not answer (${open.why}): its session is lost; start a new one with POST /sessions`,
      );
    }
    return { instance, rest: m[2] ?? '/' };
  }

  /** Relays one HTTP request to the instance (schema, uploads, the viewer page). */
  async http(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    let target;
    try {
      target = await this.target(url.pathname);
    } catch (err) {
      req.resume();
      const e = asRouterError(err);
      const status = e.code === RouterErrorCode.UnknownInstance ? 404 : e.code === RouterErrorCode.InstanceUnreachable ? 502 : 503;
      this.#c.metrics.proxied.inc({ kind: 'http', result: status === 404 ? 'unknown_instance' : status === 502 ? 'unreachable' : 'error' });
      return sendRouterError(res, status, e.code, e.message);
    }
    const { instance, rest } = target;
    const upstream = httpRequest({
      host: instance.address,
      port: instance.port,
      method: req.method,
      path: rest + url.search,
      headers: this.#forwardedHeaders(req, instance, url.pathname.slice(0, url.pathname.length - rest.length)),
      agent: this.#agent,
    });
    // A pod that is gone without a reset (its node lost, a silent drop) never answers the SYN: give up after relayConnectTimeoutMs.
    const connectTimer = setTimeout(
      () => upstream.destroy(new Error(`no connection within ${this.#c.options.relayConnectTimeoutMs} ms (relayConnectTimeoutMs)`)),
      this.#c.options.relayConnectTimeoutMs,
    );
    upstream.on('socket', (sock: Socket) => {
      if (!sock.connecting) clearTimeout(connectTimer);
      else sock.once('connect', () => clearTimeout(connectTimer));
      sock.setTimeout(this.#c.options.relayIdleTimeoutMs);
    });
    upstream.on('timeout', () => upstream.destroy(new Error(`no byte for ${this.#c.options.relayIdleTimeoutMs} ms (relayIdleTimeoutMs)`)));
    // A hung process (SIGSTOP, a blocked event loop) accepts the connection in its kernel and never answers:
    // once the request is sent, its answer's head must come within relayResponseTimeoutMs.
    let answerTimer: ReturnType<typeof setTimeout> | undefined;
    upstream.on('finish', () => {
      answerTimer = setTimeout(
        () => upstream.destroy(new Error(`no answer within ${this.#c.options.relayResponseTimeoutMs} ms (relayResponseTimeoutMs)`)),
        this.#c.options.relayResponseTimeoutMs,
      );
    });
    upstream.on('response', (answer) => {
      clearTimeout(connectTimer);
      clearTimeout(answerTimer);
      this.#reset(instance);
      this.#c.metrics.proxied.inc({ kind: 'http', result: 'ok' });
      const headers: Record<string, string | string[]> = {};
      for (const [k, v] of Object.entries(answer.headers)) if (v !== undefined && !HOP_BY_HOP.has(k)) headers[k] = v;
      res.writeHead(answer.statusCode ?? 502, headers);
      answer.pipe(res);
    });
    upstream.on('error', (err) => {
      clearTimeout(connectTimer);
      clearTimeout(answerTimer);
      if (res.headersSent) {
        res.destroy();
        return;
      }
      this.#c.metrics.proxied.inc({ kind: 'http', result: 'unreachable' });
      this.#c.log.warn(`instance ${instance.name} (${instance.address}:${instance.port}) unreachable: ${err.message}`);
      this.#trip(instance, err.message);
      sendRouterError(
        res,
        502,
        RouterErrorCode.InstanceUnreachable,
        `instance ${instance.name} did not answer: ${err.message}; its pod may be gone: start a new session with POST /sessions`,
      );
    });
    res.on('close', () => {
      clearTimeout(connectTimer);
      clearTimeout(answerTimer);
      if (!res.writableFinished) upstream.destroy();
    });
    req.pipe(upstream);
  }

  /**
   * Relays a WebSocket upgrade on `/s/{instance}/...` to the instance's pod, byte for byte, with
   * the router's own timeouts and pings, and a close frame on every cut the router sees:
   *
   * - no connection within `relayConnectTimeoutMs`, a refusal, no answer to the upgrade within
   *   `relayResponseTimeoutMs` (a hung process accepts in its kernel and never answers), or the
   *   connection lost before the answer: the viewer's socket is accepted and closed at once with
   *   4502 `instance_unreachable` (the instance's answer is held until it is whole, so nothing of
   *   it has reached the viewer yet);
   * - when the instance sent nothing for `relayPingIntervalMs` the router puts a ping between two
   *   of the client's frames, and when no byte follows within `relayPingTimeoutMs` it closes the
   *   viewer's socket with 4502;
   * - the instance's connection ends without its close frame: when the instance no longer answers
   *   `/health/live` within 1.5 s (its process died), 4502 (the session is lost); when it still
   *   does (it cut this one socket: a missed heartbeat, a backlog), the socket is cut as the
   *   instance cut it.
   */
  async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, url: URL): Promise<void> {
    const key = req.headers['sec-websocket-key'];
    /** Refuses the socket in a way a browser page can read: accepted, then closed with the code and message as its reason. */
    const refuse = (status: number, code: RouterErrorCode, message: string): void => {
      const closeCode = code === RouterErrorCode.UnknownInstance ? RouterCloseCode.UnknownInstance : RouterCloseCode.InstanceUnreachable;
      if (status === 503 || !acceptAndClose(socket, typeof key === 'string' ? key : undefined, closeCode, `${code}: ${message}`)) {
        writeHttpError(socket, status, code, message);
      }
    };
    let target;
    try {
      target = await this.target(url.pathname);
    } catch (err) {
      const e = asRouterError(err);
      const status = e.code === RouterErrorCode.UnknownInstance ? 404 : e.code === RouterErrorCode.InstanceUnreachable ? 502 : 503;
      this.#c.metrics.proxied.inc({ kind: 'ws', result: status === 404 ? 'unknown_instance' : status === 502 ? 'unreachable' : 'error' });
      return refuse(status, e.code, e.message);
    }
    const { instance, rest } = target;
    const o = this.#c.options;
    const upstream: Socket = netConnect({ host: instance.address, port: instance.port });
    let connected = false;
    let upgraded = false;
    let ended = false;
    upstream.setNoDelay(true);
    const fromClient = new FrameBoundaries();
    const fromInstance = new FrameBoundaries();
    /** The instance's answer to the upgrade, held until its head is whole. */
    let responseHead: Buffer | undefined = Buffer.alloc(0);
    let lastFromInstance = performance.now();
    let pingSentAt: number | undefined;
    let pingPending = false;
    /** Until the connection: relayConnectTimeoutMs; from it until the answer's head: relayResponseTimeoutMs. */
    let timer = setTimeout(() => {
      upstream.destroy(new Error(`no connection within ${o.relayConnectTimeoutMs} ms (relayConnectTimeoutMs)`));
    }, o.relayConnectTimeoutMs);
    const unlink = (): void => {
      clearTimeout(timer);
      clearInterval(pinger);
      this.#relays.delete(socket);
      const set = this.#relaysTo.get(instance.name);
      set?.delete(cut);
      if (set?.size === 0) this.#relaysTo.delete(instance.name);
    };
    const end = (): void => {
      if (ended) return;
      ended = true;
      unlink();
      if (connected) this.#c.metrics.openSockets.dec();
      upstream.destroy();
      socket.destroy();
    };
    /** Before the instance's answer reached the viewer: the viewer's socket is refused with 4502 and the instance's circuit opens. */
    const failBeforeAnswer = (why: string): void => {
      if (ended) return;
      ended = true;
      unlink();
      if (connected) this.#c.metrics.openSockets.dec();
      upstream.destroy();
      this.#c.metrics.proxied.inc({ kind: 'ws', result: 'unreachable' });
      this.#c.log.warn(`instance ${instance.name} (${instance.address}:${instance.port}) unreachable: ${why}`);
      this.#trip(instance, why);
      refuse(502, RouterErrorCode.InstanceUnreachable, `instance ${instance.name} ${why}; start a new session with POST /sessions`);
    };
    /** The instance is gone: the viewer gets a close frame that says so (if the instance was between frames), then the socket ends. */
    let cutting = false;
    const cut = (why: string, close?: { code: number; reason: string }): void => {
      if (ended || cutting) return;
      if (!upgraded) return failBeforeAnswer(`stopped answering (${why})`);
      cutting = true;
      if (fromInstance.atBoundary && !fromInstance.closed) {
        socket.end(
          close
            ? serverCloseFrame(close.code, close.reason)
            : serverCloseFrame(
                RouterCloseCode.InstanceUnreachable,
                `${RouterErrorCode.InstanceUnreachable}: instance ${instance.name} stopped answering (${why})`,
              ),
        );
      }
      this.#c.metrics.relaysCut.inc();
      upstream.destroy();
      setTimeout(end, 200).unref();
    };
    const pinger = setInterval(
      () => {
        if (!upgraded || ended) return;
        const now = performance.now();
        if (pingSentAt !== undefined) {
          if (now - pingSentAt > o.relayPingTimeoutMs) {
            const why = `no answer to a ping within ${o.relayPingTimeoutMs} ms`;
            this.#c.log.warn(`instance ${instance.name} (${instance.address}:${instance.port}): ${why}; closing its relayed sockets`);
            // The trip cuts every socket relayed to it, this one included.
            this.#trip(instance, why);
          }
          return;
        }
        if (now - lastFromInstance < o.relayPingIntervalMs) return;
        pingSentAt = now;
        if (fromClient.atBoundary) upstream.write(clientPingFrame());
        else pingPending = true;
      },
      Math.max(5, Math.min(o.relayPingIntervalMs, o.relayPingTimeoutMs) / 4),
    );
    pinger.unref();
    this.#relays.add(socket);
    let set = this.#relaysTo.get(instance.name);
    if (!set) this.#relaysTo.set(instance.name, (set = new Set()));
    set.add(cut);

    upstream.once('connect', () => {
      clearTimeout(timer);
      timer = setTimeout(
        () => failBeforeAnswer(`did not answer the upgrade within ${o.relayResponseTimeoutMs} ms (relayResponseTimeoutMs)`),
        o.relayResponseTimeoutMs,
      );
      connected = true;
      this.#c.metrics.proxied.inc({ kind: 'ws', result: 'ok' });
      this.#c.metrics.openSockets.inc();
      const headers = this.#forwardedHeaders(req, instance, url.pathname.slice(0, url.pathname.length - rest.length));
      const lines = [`${req.method ?? 'GET'} ${rest}${url.search} HTTP/1.1`, 'Connection: Upgrade', `Upgrade: ${req.headers.upgrade ?? 'websocket'}`];
      for (const [k, v] of Object.entries(headers)) for (const one of Array.isArray(v) ? v : [v]) lines.push(`${k}: ${one}`);
      upstream.write(`${lines.join('\r\n')}\r\n\r\n`);
      if (head.length > 0) {
        fromClient.push(head);
        upstream.write(head);
      }
      socket.on('data', (chunk: Buffer) => {
        const ends = fromClient.push(chunk);
        let out = chunk;
        if (pingPending && ends.length > 0) {
          // Put the ping right after the first frame that ends in this chunk.
          pingPending = false;
          const at = ends[0]!;
          upstream.write(chunk.subarray(0, at));
          upstream.write(clientPingFrame());
          out = chunk.subarray(at);
        }
        if (out.length > 0 && !upstream.write(out)) socket.pause();
      });
      upstream.on('drain', () => socket.resume());
      socket.on('drain', () => upstream.resume());
      upstream.on('data', (chunk: Buffer) => {
        lastFromInstance = performance.now();
        pingSentAt = undefined;
        let out = chunk;
        if (responseHead !== undefined) {
          // The instance's answer to the upgrade first, held until its head is whole; frames follow a 101 only.
          responseHead = Buffer.concat([responseHead, chunk]);
          const at = headEnd(responseHead);
          if (at < 0) {
            if (responseHead.length > MAX_RESPONSE_HEAD) failBeforeAnswer(`answered the upgrade with a head over ${MAX_RESPONSE_HEAD} bytes`);
            return;
          }
          clearTimeout(timer);
          upgraded = responseHead.subarray(0, 12).toString('latin1').startsWith('HTTP/1.1 101');
          if (upgraded) this.#reset(instance);
          out = responseHead;
          const frames = responseHead.subarray(at);
          responseHead = undefined;
          if (upgraded && frames.length > 0) fromInstance.push(frames);
        } else if (upgraded) fromInstance.push(chunk);
        if (!socket.write(out)) upstream.pause();
      });
    });
    upstream.on('error', (err) => {
      if (!connected) failBeforeAnswer(`did not accept the connection: ${err.message}`);
      else if (!upgraded && responseHead !== undefined) failBeforeAnswer(`dropped the connection before answering the upgrade: ${err.message}`);
      // After the answer, 'close' follows and decides.
    });
    upstream.on('close', () => {
      if (!connected || ended) return;
      if (!upgraded && responseHead !== undefined) return failBeforeAnswer('closed the connection before answering the upgrade');
      if (!upgraded || fromInstance.closed) return end();
      this.#lostWithoutClose(instance, 'its connection ended without a close frame', end);
    });
    socket.on('close', end);
  }

  /**
   * A relayed socket's instance connection ended without the instance's close frame. If the
   * instance no longer answers `/health/live` (its process died: kill -9, OOM), its circuit opens and
   * every viewer of it gets 4502 (the session is lost); if it still does, it cut this one socket
   * itself (a missed heartbeat, an unread backlog), and the viewer's socket is cut the same way.
   */
  #lostWithoutClose(instance: Instance, why: string, end: () => void): void {
    if (this.#probing.has(instance.name)) {
      this.#probing.get(instance.name)!.push(end);
      return;
    }
    const waiting = [end];
    this.#probing.set(instance.name, waiting);
    void servesStill(instance, LIVENESS_CHECK_MS).then((alive) => {
      this.#probing.delete(instance.name);
      if (alive) {
        for (const e of waiting) e();
        return;
      }
      this.#c.log.warn(`instance ${instance.name} (${instance.address}:${instance.port}): ${why}, and its /health/live does not answer: its sessions are lost`);
      // The trip cuts every socket still relayed to it (this one included), each with its close frame.
      this.#trip(instance, `${why}; /health/live does not answer`);
      for (const e of waiting) setTimeout(e, 200).unref();
    });
  }

  /** The headers of a relayed request, with the session id of the instance (the router's id becomes the session's). */
  #forwardedHeaders(req: IncomingMessage, instance: Instance, prefix: string): Record<string, string | string[]> {
    const out = forwardedHeaders(req, instance, this.#c.publicBase(req), prefix);
    delete out[SESSION_ID_HEADER];
    if (instance.sessionId) out[SESSION_ID_HEADER] = instance.sessionId;
    return out;
  }
}

/**
 * Whether the instance's process still serves: its `GET /health/live` answers within `timeoutMs`.
 * A TCP connect alone is not enough: a process being killed may still have its listening socket
 * for a moment after its connections ended, and the kernel accepts (then resets) for it.
 */
function servesStill(instance: Instance, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const req = httpRequest({ host: instance.address, port: instance.port, path: '/health/live', method: 'GET', agent: false });
    const done = (alive: boolean): void => {
      clearTimeout(timer);
      req.destroy();
      resolve(alive);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    req.on('response', (res) => {
      res.resume();
      done(true);
    });
    req.on('error', () => done(false));
    req.end();
  });
}

/** The headers of a relayed request: the client's, less hop-by-hop ones and `Origin` (checked here), plus `X-Forwarded-*`. */
function forwardedHeaders(req: IncomingMessage, instance: Instance, publicBase: string, prefix: string): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  const h: IncomingHttpHeaders = req.headers;
  for (const [k, v] of Object.entries(h)) {
    if (v === undefined || HOP_BY_HOP.has(k) || k.startsWith('x-forwarded-')) continue;
    out[k] = v;
  }
  out['host'] = `${instance.address.includes(':') ? `[${instance.address}]` : instance.address}:${instance.port}`;
  const prior = req.headers['x-forwarded-for'];
  const peer = req.socket.remoteAddress ?? '';
  out['x-forwarded-for'] = prior ? `${String(prior)}, ${peer}` : peer;
  const base = new URL(publicBase);
  out['x-forwarded-proto'] = base.protocol.replace(':', '');
  out['x-forwarded-host'] = base.host;
  out['x-forwarded-prefix'] = prefix;
  return out;
}
