// Rooms (room.js) against a fake gateway (fetch) and fake nodes (WebSocket): what goes on the
// wire, what the app sees, and how the room survives a dropped socket and a migrating publisher.
// The real thing (headless Chromium against the cluster, tests/pages/room.html) is the end-to-end
// tests' job.

import { test, afterEach } from 'node:test';
import assert from 'node:assert/strict';

import { FerryClient, Room } from '../ferry.js';
import { RoomView, resyncEvents } from '../room-view.js';

// ---- fakes -------------------------------------------------------------------------------------

/** A node's end of a socket: the test reads what the room sent and answers. */
class FakeWebSocket {
  static all = [];

  constructor(url) {
    this.url = url;
    this.readyState = 0;
    this.sent = [];
    this.closedByClient = false;
    FakeWebSocket.all.push(this);
    setTimeout(() => {
      if (this.readyState === 0) this.readyState = 1;
    }, 0);
  }

  send(data) {
    if (this.readyState !== 1) throw new Error('send on a socket that is not open');
    this.sent.push(JSON.parse(data));
  }

  close() {
    if (this.readyState >= 2) return;
    this.closedByClient = true;
    this.readyState = 3;
    setTimeout(() => this.onclose?.({ code: 1000, reason: '' }), 0);
  }

  // The node's side.
  receive(frame) {
    this.onmessage?.({ data: JSON.stringify(frame) });
  }

  drop() {
    this.readyState = 3;
    this.onclose?.({ code: 1006, reason: '' });
  }

  frames(type) {
    return this.sent.filter((f) => f.type === type);
  }
}

const requests = [];
/** Answers the join endpoint: `{ node, http }` by URL (the gateway places on node-a). */
let placement = () => NODE_A;
const fetch = async (url, init = {}) => {
  const req = { url: String(url), method: init.method, headers: { ...init.headers }, body: JSON.parse(init.body ?? 'null') };
  requests.push(req);
  const node = placement(req);
  if (node instanceof Response) return node;
  const participant = req.body?.participant ?? 'gen-1';
  const room = new URL(req.url).pathname.split('/')[3];
  return new Response(
    JSON.stringify({
      room,
      participant,
      node: node.id,
      http: node.http,
      ws: `${node.http.replace('http', 'ws')}/v1/rooms/${room}/ws?participant=${participant}`,
    }),
    { status: 200 },
  );
};

const NODE_A = { id: 'node-a', http: 'http://a:8081' };
const NODE_B = { id: 'node-b', http: 'http://b:8082' };

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(cond, what, ms = 3000) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(2);
  }
}

const rooms = new Set();
afterEach(() => {
  for (const r of rooms) r.close();
  rooms.clear();
  requests.length = 0;
  FakeWebSocket.all.length = 0;
  placement = () => NODE_A;
});

function state(participants = {}, chat = [], reactions = 0) {
  const full = {};
  for (const [id, p] of Object.entries(participants)) {
    full[id] = {
      name: id,
      metadata: '',
      audio_muted: false,
      video_muted: false,
      hand_raised: false,
      layout: null,
      attributes: {},
      tracks: {},
      ...p,
    };
  }
  return { participants: full, chat, reactions };
}

const welcome = (node, st, participant = 'alice') => ({ type: 'welcome', room: 'standup', participant, node, window_ms: 50, state: st });
const receipt = (key, duplicate = false) => ({ type: 'receipt', key, duplicate, stamp: `s-${key}` });

/** The nth socket, once it is open. */
async function socket(n) {
  await until(() => FakeWebSocket.all[n]?.readyState === 1, `socket ${n}`);
  return FakeWebSocket.all[n];
}

/** The node's side of a join on socket `n`: welcome, then the receipt of the join it gets. */
async function admit(n, node, st) {
  const ws = await socket(n);
  ws.receive(welcome(node, st));
  await until(() => ws.frames('join').length, `the join on socket ${n}`);
  const join = ws.frames('join').at(-1);
  ws.receive(receipt(join.key));
  return { ws, join };
}

async function joined(st = state({ alice: {} }), opts = {}) {
  const client = new FerryClient({ baseUrl: 'http://gw', token: opts.token });
  const joining = client.join('standup', { name: 'Alice', participant: 'alice', WebSocket: FakeWebSocket, fetch, ...opts.join });
  const { ws, join } = await admit(0, 'node-a', st);
  const room = await joining;
  rooms.add(room);
  return { client, room, ws, join };
}

/** Every event the room emits, by name, in order. */
function record(room) {
  const seen = [];
  for (const name of ['joined', 'left', 'register', 'published', 'unpublished', 'chat', 'reactions', 'connected', 'reconnecting', 'moved', 'error']) {
    room.on(name, (e) => seen.push({ on: name, ...e }));
  }
  return seen;
}

const strip = (events) => events.map(({ at, ...rest }) => rest);

// ---- tests -------------------------------------------------------------------------------------

test('join: POST to the gateway, the socket it names with the token, welcome, join, receipt', async () => {
  const client = new FerryClient({ baseUrl: 'http://gw/', token: 'secret' });
  let settled = false;
  const joining = client.join('standup', { name: 'Alice', participant: 'alice', metadata: 'm', WebSocket: FakeWebSocket, fetch });
  joining.then(() => (settled = true), () => (settled = true));
  const ws = await socket(0);
  assert.equal(requests.length, 1);
  const [post] = requests;
  assert.equal(post.url, 'http://gw/v1/rooms/standup/join');
  assert.equal(post.method, 'POST');
  assert.equal(post.headers.Authorization, 'Bearer secret');
  assert.equal(post.headers['Content-Type'], 'application/json');
  assert.deepEqual(post.body, { participant: 'alice', name: 'Alice' });
  const url = new URL(ws.url);
  assert.equal(`${url.origin}${url.pathname}`, 'ws://a:8081/v1/rooms/standup/ws');
  assert.equal(url.searchParams.get('participant'), 'alice');
  assert.equal(url.searchParams.get('access_token'), 'secret');
  assert.equal(url.searchParams.get('format'), 'json');
  assert.deepEqual(ws.sent, [], 'nothing before the welcome');

  ws.receive(
    welcome(
      'node-a',
      state(
        { alice: {}, bob: { name: 'Bob', audio_muted: true, attributes: { lang: 'de' }, tracks: { cam: { stream: 'standup.bob.cam', kind: 'video' } } } },
        [{ participant: 'bob', text: 'hi', stamp: 'st1', at: 1000 }],
        3,
      ),
    ),
  );
  await until(() => ws.sent.length, 'the join');
  const [join] = ws.sent;
  assert.deepEqual(Object.keys(join), ['type', 'key', 'name', 'metadata']);
  assert.deepEqual({ ...join, key: undefined }, { type: 'join', key: undefined, name: 'Alice', metadata: 'm' });
  assert.match(join.key, /^[A-Za-z0-9._-]{1,64}$/);
  await sleep(10);
  assert.equal(settled, false, 'not joined before the receipt');
  ws.receive(receipt(join.key));
  const room = await joining;
  rooms.add(room);
  assert.ok(room instanceof Room);
  assert.equal(room.name, 'standup');
  assert.equal(room.participant, 'alice');
  assert.equal(room.node, 'node-a');
  assert.equal(room.state, 'joined');
  assert.deepEqual([...room.participants.keys()], ['alice', 'bob']);
  const bob = room.participants.get('bob');
  assert.deepEqual({ ...bob, tracks: [...bob.tracks] }, {
    name: 'Bob',
    metadata: '',
    audioMuted: true,
    videoMuted: false,
    handRaised: false,
    layout: null,
    attributes: { lang: 'de' },
    tracks: [['cam', { stream: 'standup.bob.cam', kind: 'video' }]],
  });
  assert.deepEqual(room.chat, [{ participant: 'bob', text: 'hi', stamp: 'st1', at: 1000 }]);
  assert.equal(room.reactions, 3);
});

test('join: without a participant the gateway\'s id is used; no token, no access_token', async () => {
  const client = new FerryClient({ baseUrl: 'http://gw' });
  const joining = client.join('standup', { WebSocket: FakeWebSocket, fetch });
  const ws = await socket(0);
  assert.deepEqual(requests[0].body, {});
  assert.equal(requests[0].headers.Authorization, undefined);
  assert.equal(new URL(ws.url).searchParams.has('access_token'), false);
  ws.receive(welcome('node-a', state({ 'gen-1': {} }), 'gen-1'));
  await until(() => ws.sent.length, 'the join');
  assert.equal(ws.sent[0].name, 'gen-1', 'the name defaults to the id');
  ws.receive(receipt(ws.sent[0].key));
  const room = await joining;
  rooms.add(room);
  assert.equal(room.participant, 'gen-1');
});

test('join rejects with the node\'s code, the gateway\'s status, or a closed socket', async () => {
  const client = new FerryClient({ baseUrl: 'http://gw' });
  const refused = client.join('standup', { participant: 'alice', WebSocket: FakeWebSocket, fetch });
  const ws = await socket(0);
  ws.receive(welcome('node-a', state()));
  await until(() => ws.sent.length, 'the join');
  ws.receive({ type: 'error', key: ws.sent[0].key, code: 'too_large', message: 'name too long' });
  await assert.rejects(refused, (err) => err.code === 'too_large' && err.message === 'name too long');
  await until(() => ws.closedByClient, 'the socket closed');

  placement = () => new Response('bad room id', { status: 400 });
  await assert.rejects(client.join('bad room', { WebSocket: FakeWebSocket, fetch }), (err) => err.code === 'join-refused' && err.status === 400);

  placement = () => NODE_A;
  const dropped = client.join('standup', { participant: 'alice', WebSocket: FakeWebSocket, fetch });
  const ws2 = await socket(1);
  ws2.drop();
  await assert.rejects(dropped, (err) => err.code === 'closed');

  // A refused token: close code 4401 (a browser cannot read a refused upgrade's status).
  const unauthorized = client.join('standup', { participant: 'alice', WebSocket: FakeWebSocket, fetch });
  const ws3 = await socket(2);
  ws3.readyState = 3;
  ws3.onclose?.({ code: 4401, reason: 'no access token' });
  await assert.rejects(unauthorized, (err) => err.code === 'unauthorized' && err.status === 401 && err.fatal === true);
});

test('commands: frames with unique keys, resolved by receipts, rejected by error frames', async () => {
  const { room, ws, join } = await joined();
  const sent = () => ws.sent.slice(1);
  const muted = room.setMuted('audio', true);
  const hand = room.raiseHand();
  const layout = room.setLayout('grid');
  const attrs = room.setAttributes({ lang: 'de', role: null });
  const chat = room.sendChat('hi');
  const react = room.react();
  assert.deepEqual(
    sent().map(({ key, ...f }) => f),
    [
      { type: 'set', register: 'audio_muted', value: true },
      { type: 'set', register: 'hand_raised', value: true },
      { type: 'set', register: 'layout', value: 'grid' },
      { type: 'set', register: 'attribute', name: 'lang', value: 'de' },
      { type: 'set', register: 'attribute', name: 'role', value: null },
      { type: 'chat', text: 'hi' },
      { type: 'react', delta: 1 },
    ],
  );
  const keys = [join.key, ...sent().map((f) => f.key)];
  assert.equal(new Set(keys).size, keys.length, 'one key per command');
  for (const f of sent()) assert.match(f.key, /^[A-Za-z0-9._-]{1,64}$/);

  const [k1, k2, k3, k4, k5, k6, k7] = sent().map((f) => f.key);
  ws.receive(receipt(k2));
  ws.receive(receipt(k1));
  assert.deepEqual(await muted, { key: k1, duplicate: false, stamp: `s-${k1}` });
  assert.deepEqual(await hand, { key: k2, duplicate: false, stamp: `s-${k2}` });
  ws.receive({ type: 'error', key: k3, code: 'bad_value', message: 'no such layout' });
  await assert.rejects(layout, (err) => err.code === 'bad_value' && err.key === k3 && err.message === 'no such layout');
  ws.receive(receipt(k4));
  ws.receive(receipt(k5));
  assert.deepEqual((await attrs).map((r) => r.key), [k4, k5]);
  ws.receive(receipt(k6));
  ws.receive({ type: 'error', key: k7, code: 'not_in_room', message: 'join first' });
  assert.equal((await chat).key, k6);
  await assert.rejects(react, { code: 'not_in_room' });

  // send(): the app's own key, twice; the node says the second was a retry.
  const first = room.send({ type: 'chat', key: 'retry-alice', text: 'retried once' });
  ws.receive(receipt('retry-alice'));
  const second = room.send({ type: 'chat', key: 'retry-alice', text: 'retried once' });
  ws.receive(receipt('retry-alice', true));
  assert.deepEqual([(await first).duplicate, (await second).duplicate], [false, true]);
  assert.deepEqual(ws.sent.slice(-2), [
    { type: 'chat', key: 'retry-alice', text: 'retried once' },
    { type: 'chat', key: 'retry-alice', text: 'retried once' },
  ]);

  await assert.rejects(room.setMuted('screen', true), TypeError);
  await assert.rejects(room.setLayout('mosaic'), TypeError);

  const leaving = room.leave();
  const leave = ws.sent.at(-1);
  assert.equal(leave.type, 'leave');
  ws.receive(receipt(leave.key));
  await leaving;
  assert.equal(room.state, 'left');
  assert.ok(ws.closedByClient);
  await assert.rejects(room.sendChat('after'), { code: 'closed' });
});

test('events update the state and reach the listeners with their time', async () => {
  const { room, ws } = await joined(state({ alice: {}, bob: { name: 'Bob' } }));
  const seen = record(room);
  const before = performance.now();
  ws.receive({
    type: 'events',
    events: [
      { type: 'joined', participant: 'carol', name: 'Carol', metadata: '{"x":1}' },
      { type: 'register', participant: 'carol', register: 'video_muted', value: true },
      { type: 'register', participant: 'carol', register: 'layout', value: 'speaker' },
      { type: 'register', participant: 'carol', register: 'attribute', name: 'lang', value: 'fr' },
      { type: 'published', participant: 'carol', track: 'cam', stream: 'standup.carol.cam', kind: 'video' },
      { type: 'left', participant: 'bob' },
      { type: 'chat', participant: 'carol', text: 'hello', stamp: 'st9', at: 1234 },
      { type: 'reactions', total: 7 },
    ],
  });
  ws.receive({
    type: 'events',
    events: [
      { type: 'register', participant: 'carol', register: 'attribute', name: 'lang', value: null },
      { type: 'unpublished', participant: 'carol', track: 'cam' },
      { type: 'chat', participant: 'carol', text: 'hello', stamp: 'st9', at: 1234 },
    ],
  });
  assert.deepEqual([...room.participants.keys()], ['alice', 'carol']);
  const carol = room.participants.get('carol');
  assert.deepEqual({ ...carol, tracks: [...carol.tracks] }, {
    name: 'Carol',
    metadata: '{"x":1}',
    audioMuted: false,
    videoMuted: true,
    handRaised: false,
    layout: 'speaker',
    attributes: {},
    tracks: [],
  });
  assert.deepEqual(room.chat, [{ participant: 'carol', text: 'hello', stamp: 'st9', at: 1234 }], 'a chat message once');
  assert.equal(room.reactions, 7);
  assert.deepEqual(seen.map((e) => e.on), [
    'joined', 'register', 'register', 'register', 'published', 'left', 'chat', 'reactions', 'register', 'unpublished',
  ]);
  for (const e of seen) assert.ok(e.at >= before && e.at <= performance.now());
  assert.deepEqual(strip(seen)[0], { on: 'joined', type: 'joined', participant: 'carol', name: 'Carol', metadata: '{"x":1}' });
  const chat = seen.find((e) => e.on === 'chat');
  assert.deepEqual({ ...chat, at: 0 }, { on: 'chat', type: 'chat', participant: 'carol', text: 'hello', stamp: 'st9', at: 0, sentAt: 1234 });
  assert.deepEqual(strip([seen.at(-2)]), [{ on: 'register', type: 'register', participant: 'carol', register: 'attribute', name: 'lang', value: null }]);
});

test('lazy subscription: the frame, subscribed resolves it, a keyless error refuses it', async () => {
  const { room, ws } = await joined();
  const subscribing = room.subscribeEvents({ events: ['chat', 'register'], participants: ['bob'] });
  assert.deepEqual(ws.sent.at(-1), { type: 'subscribe', events: ['chat', 'register'], participants: ['bob'] });
  let done = false;
  subscribing.then(() => (done = true));
  await sleep(5);
  assert.equal(done, false);
  ws.receive({ type: 'subscribed' });
  await subscribing;

  const all = room.subscribeEvents();
  assert.deepEqual(ws.sent.at(-1), { type: 'subscribe', events: null, participants: null });
  ws.receive({ type: 'error', code: 'bad_request', message: 'unknown event type' });
  await assert.rejects(all, { code: 'bad_request' });
});

test('reconnect: backoff, a new join through the gateway, the unanswered commands again with their keys', async () => {
  const { room, ws, join } = await joined(state({ alice: {} }));
  const seen = record(room);
  const chat = room.sendChat('while dropping');
  const answered = room.raiseHand();
  const [chatFrame, handFrame] = ws.sent.slice(1);
  ws.receive(receipt(handFrame.key));
  await answered;
  ws.drop();
  assert.equal(room.state, 'reconnecting');
  const queued = room.setMuted('video', true);
  assert.equal(ws.sent.length, 3, 'nothing sent on a dead socket');

  // The first attempt: the gateway has no node; the second gets one.
  placement = () => new Response('no node', { status: 503 });
  await until(() => requests.length === 2, 'the first attempt');
  placement = () => NODE_B;
  const ws2 = await socket(1);
  assert.equal(requests.length, 3);
  assert.equal(requests[2].url, 'http://gw/v1/rooms/standup/join');
  assert.deepEqual(requests[2].body, { participant: 'alice', name: 'Alice' });
  assert.deepEqual(strip(seen.filter((e) => e.on === 'reconnecting')), [
    { on: 'reconnecting', type: 'reconnecting', reason: 'closed (1006)', attempt: 1, delayMs: 250 },
    { on: 'reconnecting', type: 'reconnecting', reason: 'join: 503 no node', attempt: 2, delayMs: 500 },
  ]);

  ws2.receive(welcome('node-b', state({ alice: {} })));
  await until(() => ws2.sent.length, 'the join');
  const [join2] = ws2.sent;
  assert.equal(join2.type, 'join');
  assert.notEqual(join2.key, join.key, 'a fresh key for the join');
  assert.equal(ws2.sent.length, 1, 'commands wait for the join');
  ws2.receive(receipt(join2.key));
  await until(() => ws2.sent.length === 3, 'the commands again');
  assert.deepEqual(ws2.sent.slice(1), [chatFrame, { type: 'set', key: ws2.sent[2].key, register: 'video_muted', value: true }]);
  ws2.receive(receipt(chatFrame.key, true));
  ws2.receive(receipt(ws2.sent[2].key));
  assert.deepEqual(await chat, { key: chatFrame.key, duplicate: true, stamp: `s-${chatFrame.key}` });
  await queued;
  assert.equal(room.state, 'joined');
  assert.equal(room.node, 'node-b');
  assert.deepEqual(strip(seen.filter((e) => e.on === 'connected')), [{ on: 'connected', type: 'connected', node: 'node-b' }]);
});

test('after a reconnect the welcome is diffed against the state: what was missed becomes events', async () => {
  const { room, ws } = await joined(
    state(
      {
        alice: {},
        bob: { name: 'Bob', tracks: { cam: { stream: 'standup.bob.cam', kind: 'video' } } },
        dave: { name: 'Dave' },
      },
      [{ participant: 'bob', text: 'old', stamp: 'st1', at: 1 }],
      2,
    ),
  );
  const subscribed = room.subscribeEvents({ events: null, participants: ['bob', 'carol'] });
  ws.receive({ type: 'subscribed' });
  await subscribed;
  const seen = record(room);
  ws.drop();
  const ws2 = await socket(1);
  ws2.receive(
    welcome(
      'node-a',
      state(
        {
          alice: { hand_raised: true },
          bob: { name: 'Bob', audio_muted: true, attributes: { lang: 'de' }, tracks: { screen: { stream: 'standup.bob.screen', kind: 'video' } } },
          carol: { name: 'Carol', layout: 'grid' },
        },
        [
          { participant: 'bob', text: 'old', stamp: 'st1', at: 1 },
          { participant: 'carol', text: 'missed', stamp: 'st2', at: 2 },
        ],
        5,
      ),
    ),
  );
  await until(() => ws2.frames('join').length, 'the join');
  assert.deepEqual(ws2.sent[0], { type: 'subscribe', events: null, participants: ['bob', 'carol'] }, 'the subscription again, first');
  ws2.receive(receipt(ws2.frames('join')[0].key));
  await until(() => room.state === 'joined', 'joined');
  const resync = seen.filter((e) => e.resync);
  assert.deepEqual(strip(resync).map(({ resync: r, on, ...e }) => e), [
    { type: 'left', participant: 'dave' },
    // alice's hand: a register event of someone the subscription leaves out
    { type: 'register', participant: 'bob', register: 'audio_muted', value: true },
    { type: 'register', participant: 'bob', register: 'attribute', name: 'lang', value: 'de' },
    { type: 'unpublished', participant: 'bob', track: 'cam' },
    { type: 'published', participant: 'bob', track: 'screen', stream: 'standup.bob.screen', kind: 'video' },
    { type: 'joined', participant: 'carol', name: 'Carol', metadata: '' },
    { type: 'register', participant: 'carol', register: 'layout', value: 'grid' },
    { type: 'chat', participant: 'carol', text: 'missed', stamp: 'st2', sentAt: 2 },
    { type: 'reactions', total: 5 },
  ]);
  assert.equal(room.participants.get('alice').handRaised, true, 'the state has it all the same');
  assert.deepEqual([...room.participants.keys()].sort(), ['alice', 'bob', 'carol']);
  assert.deepEqual(room.chat.map((m) => m.text), ['old', 'missed']);
  assert.equal(room.reactions, 5);
});

test('RoomView: no participant from a register alone, garbage dropped, unknown types passed on', () => {
  const view = new RoomView();
  assert.equal(view.apply({ type: 'register', participant: 'ghost', register: 'hand_raised', value: true }), true);
  assert.equal(view.participants.size, 0);
  for (const bad of [null, 'x', [], { participant: 'a' }, { type: 'joined' }]) assert.equal(view.apply(bad), false);
  assert.equal(view.apply({ type: 'register', participant: 'ghost', register: 'attribute', value: 1 }), true);
  assert.equal(view.apply({ type: 'future', x: 1 }), true);
  view.apply({ type: 'joined', participant: 'a', name: 'A', metadata: '' });
  view.apply({ type: 'register', participant: 'a', register: 'hand_raised', value: true });
  view.apply({ type: 'joined', participant: 'a', name: 'A2', metadata: 'm' });
  assert.equal(view.participants.get('a').handRaised, true, 'a refreshed join keeps the registers');
  assert.equal(view.participants.get('a').name, 'A2');
  assert.equal(view.apply({ type: 'register', participant: 'a', register: 'attribute', value: 'no name' }), false);
});

test('resyncEvents: equal states give nothing', () => {
  const participants = new Map([
    ['a', { name: 'A', metadata: '', audioMuted: true, videoMuted: false, handRaised: false, layout: 'grid', attributes: { k: 'v' }, tracks: new Map([['cam', { stream: 'r.a.cam', kind: 'video' }]]) }],
  ]);
  const st = state({ a: { name: 'A', audio_muted: true, layout: 'grid', attributes: { k: 'v' }, tracks: { cam: { stream: 'r.a.cam', kind: 'video' } } } }, [{ stamp: 's' }], 4);
  assert.deepEqual(resyncEvents(participants, new Set(['s']), 4, st), []);
  assert.deepEqual(resyncEvents(new Map(), new Set(), 0, null), []);
});

test('a published session that migrates moves the socket to its new node, make before break', async () => {
  const { client, room, ws } = await joined(state({ alice: {} }));
  const seen = record(room);
  const listeners = new Map();
  const session = {
    location: 'http://a:8081/whip/standup.alice.cam/s1',
    node: 'node-a',
    closed: false,
    on(name, fn) {
      listeners.set(name, fn);
      return this;
    },
    async close() {
      this.closed = true;
    },
  };
  const calls = [];
  client.publish = async (...args) => {
    calls.push(args);
    return session;
  };
  const media = { getTracks: () => [{ kind: 'video' }] };
  const publishing = room.publish(media, { codec: 'h264' });
  await until(() => ws.frames('publish').length, 'the publish command');
  assert.deepEqual(calls, [['standup.alice.cam', media, { codec: 'h264', endpoint: 'http://a:8081/whip/standup.alice.cam' }]]);
  const announce = ws.frames('publish')[0];
  assert.deepEqual(announce, { type: 'publish', key: announce.key, track: 'cam', stream: 'standup.alice.cam', kind: 'video' });
  ws.receive(receipt(announce.key));
  assert.equal(await publishing, session);

  // The session moves to node-b; a command is under way on node-a.
  // The session moves to node-b while two commands are under way on node-a.
  const early = room.sendChat('answered by node-a');
  const late = room.sendChat('answered by node-b');
  const [earlyFrame, lateFrame] = ws.sent.slice(-2);
  session.location = 'http://b:8082/whip/standup.alice.cam/s1';
  session.node = 'node-b';
  listeners.get('migrated')({ event: 'migrated', mode: 'reconnect', from: 'node-a', to: 'node-b' });
  const ws2 = await socket(1);
  assert.equal(requests.at(-1).url, 'http://b:8082/v1/rooms/standup/join');
  assert.deepEqual(requests.at(-1).body, { participant: 'alice', name: 'Alice' });
  ws.receive({ type: 'events', events: [{ type: 'joined', participant: 'bob', name: 'Bob', metadata: '' }] });

  ws2.receive(welcome('node-b', state({ alice: { tracks: { cam: { stream: 'standup.alice.cam', kind: 'video' } } }, bob: { name: 'Bob' } })));
  await until(() => ws2.frames('join').length, 'the join on node-b');
  assert.equal(ws.closedByClient, false, 'the old socket stays until the new one is joined');
  // Events only from the new socket from now on; the old one still answers what was sent on it.
  ws.receive({ type: 'events', events: [{ type: 'joined', participant: 'zed', name: 'Zed', metadata: '' }] });
  ws.receive(receipt(earlyFrame.key));
  assert.equal((await early).key, earlyFrame.key);
  ws2.receive(receipt(ws2.frames('join')[0].key));
  await until(() => ws.closedByClient, 'the old socket closed');
  await until(() => ws2.frames('chat').length, 'the unanswered command again');
  assert.deepEqual(ws2.frames('chat'), [lateFrame]);
  ws2.receive(receipt(lateFrame.key, true));
  assert.deepEqual(await late, { key: lateFrame.key, duplicate: true, stamp: `s-${lateFrame.key}` });
  assert.equal(room.node, 'node-b');
  ws2.receive({ type: 'events', events: [{ type: 'register', participant: 'bob', register: 'hand_raised', value: true }] });
  assert.equal(room.participants.get('bob').handRaised, true);
  assert.equal(room.participants.has('zed'), false);
  assert.deepEqual(strip(seen).map((e) => `${e.on} ${e.participant ?? ''}${e.from ? `${e.from}→${e.to}` : ''}${e.node ?? ''}`), [
    'joined bob',
    'published alice',
    'moved node-a→node-b',
    'connected node-b',
    'register bob',
  ]);

  // Closing the room closes its sessions.
  room.close();
  await until(() => session.closed, 'the session closed');
  assert.ok(ws2.closedByClient);
});

test('a move the new node does not answer keeps the old socket and says so', async () => {
  const { client, room, ws } = await joined();
  const seen = record(room);
  const listeners = new Map();
  const session = { location: 'http://a:8081/whip/x/s1', on: (n, fn) => listeners.set(n, fn), close: async () => {} };
  client.publish = async () => session;
  const publishing = room.publish({}, { track: 'screen' });
  await until(() => ws.frames('publish').length, 'the publish command');
  assert.equal(ws.frames('publish')[0].track, 'screen');
  ws.receive(receipt(ws.frames('publish')[0].key));
  await publishing;
  placement = () => new Response('down', { status: 503 });
  session.location = 'http://b:8082/whip/x/s1';
  listeners.get('migrated')({ event: 'migrated' });
  await until(() => seen.length, 'the error');
  await assert.rejects(room.publish({}, { track: 'x'.repeat(51) }), { code: 'bad_request' });
  assert.deepEqual(strip(seen), [{ on: 'error', type: 'error', code: 'move-failed', message: 'moving to http://b:8082: join: 503 down' }]);
  assert.equal(ws.closedByClient, false);
  ws.receive({ type: 'events', events: [{ type: 'reactions', total: 1 }] });
  assert.equal(room.reactions, 1);
});
