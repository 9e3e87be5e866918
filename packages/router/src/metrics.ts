/** Prometheus metrics of one router (a registry per router, so several never collide). */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** The metrics a router keeps; `registry.metrics()` renders them for `GET /metrics`. */
export class RouterMetrics {
  readonly registry = new Registry();

  constructor() {
    // process_cpu_seconds_total and friends: what the relay costs (docs/scale-out.md, "Video around the router").
    collectDefaultMetrics({ register: this.registry });
  }

  readonly allocations = new Counter({
    name: 'reactor_router_allocations_total',
    help: 'POST /sessions by outcome: allocated (201), no_free_instance (429), conflict (503 after the retries), error (the Kubernetes API failed).',
    labelNames: ['result'],
    registers: [this.registry],
  });
  readonly noFreeInstance = new Counter({
    name: 'reactor_router_no_free_instance_total',
    help: 'POST /sessions answered 429 because no instance of the fleet was Ready.',
    registers: [this.registry],
  });
  readonly conflicts = new Counter({
    name: 'reactor_router_allocation_conflicts_total',
    help: 'Allocations that met 409 Conflict (or Contention) and were retried.',
    registers: [this.registry],
  });
  readonly allocationSeconds = new Histogram({
    name: 'reactor_router_allocation_duration_seconds',
    help: 'POST /sessions from request to answer (the GameServerAllocation and its retries), seconds.',
    labelNames: ['result'],
    buckets: [0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [this.registry],
  });
  readonly lookups = new Counter({
    name: 'reactor_router_session_lookups_total',
    help: 'GET /sessions/{id} by outcome: found, not_found, error.',
    labelNames: ['result'],
    registers: [this.registry],
  });
  readonly proxied = new Counter({
    name: 'reactor_router_proxied_total',
    help: 'Requests proxied to an instance: ws (WebSocket upgrades) and http, by outcome (ok, unknown_instance, unreachable).',
    labelNames: ['kind', 'result'],
    registers: [this.registry],
  });
  readonly openSockets = new Gauge({
    name: 'reactor_router_proxied_websockets',
    help: 'WebSocket connections the router is relaying now.',
    registers: [this.registry],
  });
  readonly releases = new Counter({
    name: 'reactor_router_releases_total',
    help: 'DELETE /sessions/{id} by outcome: released, not_found, error.',
    labelNames: ['result'],
    registers: [this.registry],
  });
  readonly deadAllocations = new Counter({
    name: 'reactor_router_dead_allocations_total',
    help: 'Allocations Agones answered with an instance that could not take a user (its circuit open, its /health/ready not 200, or no answer); the router allocated again.',
    registers: [this.registry],
  });
  readonly breakerTrips = new Counter({
    name: 'reactor_router_breaker_trips_total',
    help: 'Instances whose circuit opened: a relayed connection was refused or timed out, or a ping went unanswered.',
    registers: [this.registry],
  });
  readonly relaysCut = new Counter({
    name: 'reactor_router_relays_cut_total',
    help: 'Relayed WebSockets the router closed with instance_unreachable because their instance stopped answering.',
    registers: [this.registry],
  });
  /** Set by the router: the fleet's GameServers by state, from its cache, at each scrape. */
  instancesByState: () => Map<string, number> = () => new Map();
  readonly instances = new Gauge({
    name: 'reactor_router_instances',
    help: "The fleet's GameServers by state (Ready, Allocated, Unhealthy, ...), as the router's cache holds them; Ready ones carrying the draining label count as draining.",
    labelNames: ['state'],
    registers: [this.registry],
    collect: () => {
      this.instances.reset();
      // The usual states at 0 too, so an alert on "no Ready instance" sees a 0, not a missing series.
      for (const state of ['Ready', 'Allocated', 'Unhealthy', 'draining']) this.instances.set({ state }, 0);
      for (const [state, n] of this.instancesByState()) this.instances.set({ state }, n);
    },
  });
  readonly unhealthy = new Counter({
    name: 'reactor_router_instances_unhealthy_total',
    help: 'GameServers the router saw become Unhealthy (Agones missed their Health() pings, or their container failed).',
    registers: [this.registry],
  });
  readonly rejected = new Counter({
    name: 'reactor_router_rejected_total',
    help: 'Requests refused by the access rules, by reason (host, unauthorized, origin).',
    labelNames: ['reason'],
    registers: [this.registry],
  });

  /** Set by the router: the waiting line's length and its oldest wait, ms, at each scrape. */
  queueState: () => { length: number; oldestWaitMs: number } = () => ({ length: 0, oldestWaitMs: 0 });
  readonly queueLength: Gauge = new Gauge({
    name: 'reactor_router_queue_length',
    help: 'Requests of POST /sessions?wait= waiting for a free instance now (an autoscaler scales the fleet up on it).',
    registers: [this.registry],
    collect: (): void => this.queueLength.set(this.queueState().length),
  });
  readonly queueOldestWait: Gauge = new Gauge({
    name: 'reactor_router_queue_oldest_wait_seconds',
    help: 'How long the first request in the waiting line has waited, seconds (0 when none waits).',
    registers: [this.registry],
    collect: (): void => this.queueOldestWait.set(this.queueState().oldestWaitMs / 1000),
  });
  readonly queueWait = new Histogram({
    name: 'reactor_router_queue_wait_seconds',
    help: 'Time requests spent in the waiting line, by how it ended (allocated, timeout, cancelled, closed), seconds.',
    labelNames: ['result'],
    buckets: [0.1, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300],
    registers: [this.registry],
  });
}
