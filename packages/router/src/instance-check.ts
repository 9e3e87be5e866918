/**
 * The router's own look at an instance before it hands it to a user: `GET /health/ready` on the
 * pod, which answers 200 exactly when a new user would get a stream now. Agones' view lags it: a
 * draining instance's label and a hung or stalled one's `Unhealthy` reach the GameServer only
 * after the SDK sidecar's rate limit (500 ms) or the health check's period (seconds).
 */
import { request as httpRequest } from 'node:http';
import type { Instance } from './instance.js';

/** What the check found: `ok`, or why not, and whether the instance answered at all. */
export type InstanceCheck = { ok: true } | { ok: false; answered: boolean; why: string };

/**
 * Asks the instance's `/health/ready` with a deadline.
 * @returns `ok` on a 200; the reasons of a 503 (`closing: the instance is draining ...`); `answered: false` when it refused, dropped or did not answer within `timeoutMs`.
 */
export function checkInstance(instance: Instance, timeoutMs: number): Promise<InstanceCheck> {
  return new Promise((resolve) => {
    let settled = false;
    const done = (r: InstanceCheck): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      req.destroy();
      resolve(r);
    };
    const req = httpRequest({ host: instance.address, port: instance.port, path: '/health/ready', method: 'GET', agent: false });
    const timer = setTimeout(() => done({ ok: false, answered: false, why: `/health/ready did not answer within ${timeoutMs} ms` }), timeoutMs);
    req.on('error', (err) => done({ ok: false, answered: false, why: `/health/ready failed: ${err.message}` }));
    req.on('response', (res) => {
      if (res.statusCode === 200) {
        res.resume();
        return done({ ok: true });
      }
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        if (body.length < 4096) body += d;
      });
      res.on('end', () => {
        let why = `/health/ready answered ${res.statusCode}`;
        try {
          const reasons = (JSON.parse(body) as { reasons?: Array<{ code?: string; message?: string }> }).reasons ?? [];
          if (reasons.length > 0) why += ` (${reasons.map((r) => `${r.code}: ${r.message}`).join('; ')})`;
        } catch {
          // not JSON: the status says enough
        }
        done({ ok: false, answered: true, why });
      });
      res.on('error', () => done({ ok: false, answered: true, why: `/health/ready answered ${res.statusCode}` }));
    });
    req.end();
  });
}
