// The JavaScript machine against the scenarios the Rust machine recorded, and ports of the Rust
// unit tests (sdk-client/src/fsm/tests.rs).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

import { DEFAULT_CONFIG, Machine } from '../fsm.js';

const doc = JSON.parse(readFileSync(new URL('../../fsm-scenarios.json', import.meta.url), 'utf8'));

// Two origins: 0, and one far from it with a fractional part, so a time of 0 is never mistaken
// for "none" and sums stay exact.
for (const t0 of [0, 987_654.25]) {
  for (const sc of doc.scenarios) {
    test(`scenario replays exactly (t0 = ${t0}): ${sc.name}`, () => {
      const m = new Machine(sc.kind, sc.config ?? {}, sc.seed, sc.keySeed);
      sc.steps.forEach((step, i) => {
        const at = t0 + step.at;
        if (step.input) m.handleInput(at, structuredClone(step.input));
        else m.handleTimeout(at);
        const commands = [];
        for (let c = m.pollCommand(); c; c = m.pollCommand()) commands.push(c);
        const next = m.pollTimeout();
        const got = { commands, state: m.state, next: next == null ? null : next - t0 };
        assert.deepStrictEqual(got, step.expect, `${sc.name} step ${i} (at ${step.at})`);
      });
    });
  }
}

test('every scenario step was recorded', () => {
  const steps = doc.scenarios.flatMap((s) => s.steps);
  assert.ok(steps.length > 100);
  assert.ok(steps.every((s) => s.expect && Array.isArray(s.expect.commands)));
  assert.ok(steps.some((s) => !s.input), 'timeouts are replayed too');
});

const A = 'http://node-a/whep/cam/s1';
const B = 'http://node-b/whep/cam/s1';

/** A machine under a virtual clock: times are milliseconds from its start. */
class H {
  constructor(kind) {
    this.m = new Machine(kind, {}, 7, 'k');
    this.now = 0;
  }

  drain() {
    const out = [];
    for (let c = this.m.pollCommand(); c; c = this.m.pollCommand()) out.push(c);
    return out;
  }

  input(ms, input) {
    assert.ok(ms >= this.now, 'time goes forward');
    this.now = ms;
    this.m.handleInput(ms, input);
    return this.drain();
  }

  /** Runs every timer due up to `ms`. */
  runTo(ms) {
    const out = [];
    for (let t = this.m.pollTimeout(); t != null && t <= ms; t = this.m.pollTimeout()) {
      this.now = t;
      this.m.handleTimeout(t);
      out.push(...this.drain());
    }
    this.now = ms;
    return out;
  }

  /** Started, answered by node-a and connected; for play, frames flow at 30 fps up to `until`. */
  static connected(kind, until) {
    const h = new H(kind);
    h.input(0, { type: 'start', ticket: null });
    h.input(40, answered(1, A, 's1', 'node-a', 't1'));
    h.input(80, { type: 'connected', transport: 1 });
    assert.equal(h.m.state, 'connected');
    if (kind === 'play') h.frames(1, 100, until, 1);
    return h;
  }

  /** Frames on `transport` every 33 ms in [from, to]; returns the last total. */
  frames(transport, from, to, first) {
    let total = first;
    for (let t = from; t <= to; t += 33) {
      this.input(t, { type: 'frames', transport, total });
      total += 1;
    }
    return total - 1;
  }
}

const answered = (transport, location, session, node, ticket) => ({
  type: 'answered',
  transport,
  location,
  session,
  node,
  ticket,
});
const emitted = (cmds) => cmds.filter((c) => c.type === 'emit');
const states = (cmds) => emitted(cmds).filter((e) => e.event === 'state').map((e) => e.state);
const migrated = (cmds) => emitted(cmds).find((e) => e.event === 'migrated');

test('connects and follows its url', () => {
  const h = new H('play');
  assert.deepStrictEqual(h.input(0, { type: 'start', ticket: null }), [
    { type: 'emit', event: 'state', state: 'connecting', previous: 'idle', reason: null },
    {
      type: 'post',
      transport: 1,
      endpoint: { to: 'gateway' },
      idempotency_key: 'k-1',
      ticket: null,
      failed_node: null,
    },
  ]);
  assert.equal(h.m.pollTimeout(), 10_000, 'connect timeout');
  assert.deepStrictEqual(h.input(40, answered(1, A, 's1', 'node-a', 't1')), [
    { type: 'store-ticket', ticket: 't1' },
  ]);
  assert.deepStrictEqual(h.input(80, { type: 'connected', transport: 1 }), [
    { type: 'adopt', transport: 1 },
    { type: 'subscribe', location: A },
    { type: 'emit', event: 'state', state: 'connected', previous: 'connecting', reason: null },
  ]);
  assert.equal(h.m.location, A);
  assert.equal(h.m.node, 'node-a');
  assert.equal(h.m.currentTransport, 1);
  assert.equal(h.m.pollTimeout(), null);
});

test('ice-restart migration reports blackout and first frame', () => {
  const h = H.connected('play', 1000);
  const c = h.input(1010, {
    type: 'migrate',
    mode: 'ice-restart',
    from: 'node-a',
    target: 'node-b',
    location: B,
    ticket: null,
  });
  assert.deepStrictEqual(states(c), ['migrating']);
  assert.deepStrictEqual(c.at(-1), { type: 'restart-ice', transport: 1, location: B });
  assert.equal(h.m.pollTimeout(), 3010, 'switch timeout');
  assert.deepStrictEqual(h.input(1040, { type: 'restart-answered', transport: 1 }), [
    { type: 'subscribe', location: B },
  ]);
  assert.deepStrictEqual(states(h.input(1090, { type: 'frames', transport: 1, total: 100 })), ['connected']);
  h.frames(1, 1123, 1700, 101);
  const m = migrated(h.runTo(1700));
  assert.deepStrictEqual([m.mode, m.blackoutMs, m.firstFrameMs], ['ice-restart', 99, 80]);
  assert.equal(h.m.node, 'node-b');
});

test('a dead node is left through the gateway with the ticket', () => {
  const h = H.connected('play', 1000);
  let c = h.input(1010, { type: 'lost', transport: 1, cause: 'node-unreachable' });
  assert.deepStrictEqual(states(c), ['reconnecting']);
  assert.ok(c.some((x) => x.type === 'restart-ice' && x.location === A));
  assert.equal(h.m.pollTimeout(), 2010, 'restart timeout');
  c = h.input(1012, { type: 'restart-failed', transport: 1, status: 0, reason: 'connection refused' });
  assert.deepStrictEqual(c.at(-1), {
    type: 'post',
    transport: 2,
    endpoint: { to: 'gateway' },
    idempotency_key: 'k-2',
    ticket: 't1',
    failed_node: 'node-a',
  });
  h.input(1030, answered(2, B, 's1', 'node-b', 't2'));
  c = h.input(1250, { type: 'frames', transport: 2, total: 1 });
  assert.deepStrictEqual(states(c), ['connected']);
  assert.deepStrictEqual(emitted(c).find((e) => e.event === 'reconnected'), {
    type: 'emit',
    event: 'reconnected',
    downtimeMs: 240,
    how: 'reconnect',
    resumed: true,
    node: 'node-b',
  });
  assert.equal(h.m.ticket, 't2');
});

test('a refused ticket falls back to a clean session', () => {
  for (const status of [403, 409, 410]) {
    const h = H.connected('play', 200);
    h.input(300, { type: 'lost', transport: 1, cause: 'ice' });
    h.input(301, { type: 'restart-failed', transport: 1, status: 404, reason: 'no session' });
    const c = h.input(310, { type: 'post-failed', transport: 2, status, reason: 'ticket' });
    assert.ok(emitted(c).some((e) => e.code === 'ticket-rejected' && e.status === status));
    assert.ok(c.some((x) => x.type === 'store-ticket' && x.ticket === null));
    assert.ok(c.some((x) => x.type === 'close-transport' && x.transport === 2));
    assert.deepStrictEqual(c.at(-1), {
      type: 'post',
      transport: 3,
      endpoint: { to: 'gateway' },
      idempotency_key: 'k-3',
      ticket: null,
      failed_node: 'node-a',
    });
    h.input(330, answered(3, B, 's9', 'node-b', 't9'));
    const d = h.input(400, { type: 'frames', transport: 3, total: 1 });
    assert.ok(emitted(d).some((e) => e.event === 'reconnected' && e.resumed === false));
    assert.equal(h.m.session, 's9');
  }
});

test('retries back off exponentially with jitter, repeat the same request, and give up', () => {
  const h = H.connected('publish', 100);
  h.input(200, { type: 'lost', transport: 1, cause: 'ice' });
  h.input(201, { type: 'restart-failed', transport: 1, status: 0, reason: 'refused' });
  const delays = [];
  const keys = [];
  let transport = 2;
  let now = 202;
  for (;;) {
    const c = h.input(now, { type: 'post-failed', transport, status: 0, reason: 'refused' });
    if (h.m.state === 'failed') {
      assert.ok(emitted(c).some((e) => e.code === 'gave-up'));
      break;
    }
    const d = emitted(c).find((e) => e.event === 'reconnecting').delayMs;
    delays.push(d);
    const post = h.runTo(now + d).find((x) => x.type === 'post');
    assert.ok(post, `no retry after ${d} ms`);
    transport = post.transport;
    keys.push(post.idempotency_key);
    now += d;
  }
  assert.equal(delays.length, DEFAULT_CONFIG.maxAttempts);
  delays.forEach((d, i) => {
    const base = Math.min(100 * 2 ** i, 5000);
    assert.ok(d >= base && d <= (base * 3) / 2, `attempt ${i}: ${d} ms`);
  });
  assert.ok(delays.some((d) => d % 100 !== 0), `jitter: ${delays}`);
  // No answer means the server may have made the session: the same request again.
  assert.ok(keys.every((k) => k === keys[0]), `${keys}`);
  assert.equal(transport, 2, 'the same transport (and so the same offer) is POSTed again');
});

test('backoff stays within its bounds for any seed and matches u32 xorshift', () => {
  for (const seed of [1, 7, 0xffffffff, 0x80000000, 123456789]) {
    const m = new Machine('play', {}, seed, 'k');
    for (let n = 1; n <= 30; n += 1) {
      const base = Math.min(100 * 2 ** Math.min(n - 1, 20), 5000);
      const d = m.backoff(n);
      assert.ok(Number.isInteger(d) && d >= base && d <= base * 1.5, `seed ${seed} n ${n}: ${d}`);
      assert.ok(m.rng > 0 && m.rng <= 0xffffffff && Number.isInteger(m.rng));
    }
  }
  // The reference sequence, computed with BigInt u32 arithmetic.
  let x = 7n;
  const mask = 0xffffffffn;
  const m = new Machine('play', {}, 7, 'k');
  for (let i = 0; i < 1000; i += 1) {
    x = (x ^ (x << 13n)) & mask;
    x ^= x >> 17n;
    x = (x ^ (x << 5n)) & mask;
    assert.equal(m.random(), Number(x));
  }
  assert.equal(new Machine('play', {}, 0, 'k').rng, 1, 'seed 0 counts as 1');
});

test('a migration that fails falls back to the source, then the gateway', () => {
  const h = H.connected('publish', 100);
  h.input(200, { type: 'migrate', mode: 'ice-restart', from: null, target: 'node-b', location: B, ticket: null });
  // The target never answers.
  const c = h.runTo(2200);
  assert.ok(emitted(c).some((e) => e.code === 'migration-timeout' && e.message === 'ice-restart: no answer'));
  assert.equal(h.m.state, 'reconnecting');
  assert.ok(c.some((x) => x.type === 'restart-ice' && x.transport === 1 && x.location === A));
  assert.deepStrictEqual(h.input(2210, { type: 'restart-answered', transport: 1 }), [
    { type: 'subscribe', location: A },
  ]);
  const d = h.input(2230, { type: 'connected', transport: 1 });
  assert.deepStrictEqual(states(d), ['connected']);
  assert.ok(emitted(d).some((e) => e.event === 'reconnected' && e.how === 'ice-restart' && e.downtimeMs === 30));
});

test('video goes off when the network cannot carry it and comes back', () => {
  const h = H.connected('publish', 100);
  [900_000, 100_000, 90_000].forEach((bps, i) => {
    assert.deepStrictEqual(h.input(1000 * (i + 1), { type: 'throughput', bps, loss: 0 }), []);
  });
  let c = h.input(4000, { type: 'throughput', bps: 80_000, loss: 0 });
  assert.ok(c.some((x) => x.type === 'set-video' && x.enabled === false));
  assert.deepStrictEqual(states(c), ['degraded']);
  // Good figures, but video waits `probeAfter`.
  assert.deepStrictEqual(h.input(9000, { type: 'throughput', bps: 60_000, loss: 0 }), []);
  c = h.input(14_000, { type: 'throughput', bps: 60_000, loss: 0.01 });
  assert.ok(c.some((x) => x.type === 'set-video' && x.enabled === true));
  assert.deepStrictEqual(states(c), ['connected']);
  // It fails again at once: the next wait is twice as long.
  for (const t of [15_000, 16_000, 17_000]) h.input(t, { type: 'throughput', bps: 50_000, loss: 0.3 });
  assert.equal(h.m.state, 'degraded');
  assert.deepStrictEqual(h.input(30_000, { type: 'throughput', bps: 50_000, loss: 0 }), [], '20 s now');
  c = h.input(37_000, { type: 'throughput', bps: 50_000, loss: 0 });
  assert.ok(c.some((x) => x.type === 'set-video' && x.enabled === true));
});

test('close deletes and forgets the ticket', () => {
  const h = H.connected('play', 200);
  assert.deepStrictEqual(h.input(300, { type: 'close' }), [
    { type: 'delete', location: A },
    { type: 'store-ticket', ticket: null },
    { type: 'close-transport', transport: 1 },
    { type: 'emit', event: 'state', state: 'closed', previous: 'connected', reason: 'closed' },
  ]);
  assert.deepStrictEqual(h.input(400, { type: 'start', ticket: null }), []);
  assert.equal(h.m.pollTimeout(), null);
});

test('a first POST refused fails with the reason', () => {
  const h = new H('play');
  h.input(0, { type: 'start' });
  const c = h.input(10, { type: 'post-failed', transport: 1, status: 404, reason: 'stream cam has no publisher' });
  assert.equal(h.m.state, 'failed');
  assert.ok(emitted(c).some((e) => e.state === 'failed' && e.reason.includes('no publisher')));
});

test('stale inputs of other transports change nothing', () => {
  const h = H.connected('play', 200);
  for (const input of [
    { type: 'connected', transport: 9 },
    { type: 'lost', transport: 9, cause: 'ice' },
    { type: 'restart-answered', transport: 1 },
    answered(1, B, 'x', null, null),
    { type: 'post-failed', transport: 1, status: 500, reason: '' },
  ]) {
    assert.deepStrictEqual(h.input(300, input), []);
  }
  assert.equal(h.m.state, 'connected');
  assert.equal(h.m.location, A);
});
