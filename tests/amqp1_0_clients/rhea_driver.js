// An unmodified rhea client doing one AMQP 1.0 scenario against a broker, for the
// integration tests: it prints what happened as JSON lines on stdout (the last one is
// {"scenario": ..., "ok": true, ...} with the figures, or {"error": ...} and exit 1).
//
//   node rhea_driver.js --port P --scenario NAME --address A [--count N] [--durable]
//                       [--host 127.0.0.1] [--user guest --password guest] [--hostname H]
//                       [--container-id ID] [--subscription NAME] [--subject S] [--timeout SECONDS]
//
// Scenarios:
//   send-receive          send N (durable=true with --durable), wait for N accepted
//                         outcomes; then receive N and accept them
//   selector              send N with application property color red/blue alternating;
//                         a receiver with the JMS selector "color = 'red'" gets the red ones,
//                         a plain receiver the rest
//   browse                send N; a browsing receiver (distribution-mode copy) sees N, a
//                         consuming receiver then still gets N
//   reply-to              a dynamic receiver (temporary node) as reply-to; the request goes
//                         to the address, a responder answers to its reply-to
//   durable-subscription  a durable receiver (terminus durable, expiry never) named
//                         --subscription on the address (a topic/exchange), detached
//                         without closing; N sent meanwhile; a new connection with the same
//                         container id re-attaches the link and gets the N; then closes it.
//                         The N carry the subject --subject (default "drivers"): an
//                         exchange routes by it
//   exactly-once          a sender in rcv-settle-mode second (its target durable with its
//                         unsettled state, named --subscription) sends N; each outcome arrives
//                         unsettled and the sender settles it; the link is detached without
//                         closing; then a receiver in rcv-settle-mode second takes the N, its
//                         outcomes sent unsettled and settled by the broker
//   bad-selector          a receiver with a selector that does not parse: the broker refuses
//                         it; the error's condition and description are reported
//   priority              a receiver without priority (credit N) and one with the link property
//                         rabbitmq:priority 5 (credit N/2) on the address; N sent: which
//                         receiver got each message, in order
//   management            AMQP management (Broker-J's $management node): CREATE a queue
//                         named --address, READ it and DELETE it by object-path; the answers
//                         come on a receiver from $management whose target is the reply-to
'use strict';

const rhea = require('rhea');

function parseArgs(argv) {
  const a = { host: '127.0.0.1', user: 'guest', password: 'guest', count: 10, durable: false,
    timeout: 60, subject: 'drivers', 'container-id': `rhea-driver-${process.pid}`, subscription: 'rhea-driver-sub' };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i].replace(/^--/, '');
    if (k === 'durable') a.durable = true;
    else a[k] = argv[++i];
  }
  a.count = Number(a.count);
  a.port = Number(a.port);
  return a;
}

const a = parseArgs(process.argv.slice(2));
const emit = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const fatal = (message) => { emit({ scenario: a.scenario, error: message }); process.exit(1); };

function connect(containerId) {
  const container = rhea.create_container({ id: containerId || a['container-id'] });
  const options = { host: a.host, port: a.port, username: a.user, password: a.password, reconnect: false };
  if (a.hostname) options.hostname = a.hostname;
  const conn = container.connect(options);
  // the broker may accept the open and close the connection right after (an unknown
  // hostname, say): that ends the scenario whenever it happens
  conn.on('connection_error', (ctx) => fatal(`connection error ${JSON.stringify(ctx.connection.error)}`));
  const close = conn.close.bind(conn);
  conn.close = (...args) => { conn.closing = true; return close(...args); };
  conn.on('disconnected', (ctx) => { if (!conn.closing) fatal(`disconnected: ${ctx.error || 'no reason'}`); });
  return new Promise((resolve) => conn.once('connection_open', () => resolve(conn)));
}

function opened(link, kind) {
  return new Promise((resolve, reject) => {
    link.once(`${kind}_open`, () => resolve(link));
    link.once(`${kind}_error`, (ctx) => reject(new Error(`${kind} error ${JSON.stringify(ctx[kind].error)}`)));
  });
}

async function sendAll(conn, address, messages) {
  const sender = await opened(conn.open_sender({ target: { address } }), 'sender');
  let accepted = 0, other = 0, i = 0;
  await new Promise((resolve) => {
    const pump = () => {
      while (i < messages.length && sender.sendable()) sender.send(messages[i++]);
    };
    const settled = () => { if (accepted + other === messages.length) resolve(); };
    sender.on('sendable', pump);
    sender.on('accepted', () => { accepted++; settled(); });
    for (const o of ['rejected', 'released', 'modified']) sender.on(o, () => { other++; settled(); });
    pump();
  });
  sender.close();
  return { sent: i, accepted, other };
}

// Receive `count` messages from a receiver opened with `options`; `count` 0 waits `quietMs`
// and returns what came.
async function receive(conn, options, count, quietMs = 0) {
  const receiver = await opened(conn.open_receiver({ credit_window: Math.max(count, 10), autoaccept: true, ...options }), 'receiver');
  const got = [];
  await new Promise((resolve) => {
    let timer = null;
    const done = () => { if (timer) clearTimeout(timer); resolve(); };
    receiver.on('message', (ctx) => {
      got.push(ctx.message);
      if (count && got.length >= count) done();
    });
    if (!count) timer = setTimeout(done, quietMs);
  });
  return { receiver, got };
}

const body = (m) => (Buffer.isBuffer(m.body) ? m.body.toString() : (m.body && m.body.content ? m.body.content.toString() : m.body));
const numbered = (n, extra = () => ({})) => Array.from({ length: n }, (_, i) => ({
  body: `message ${i}`, durable: a.durable, application_properties: { i, ...extra(i) } }));

const scenarios = {
  async 'send-receive'() {
    const conn = await connect();
    const sent = await sendAll(conn, a.address, numbered(a.count));
    emit({ event: 'sent', ...sent });
    const { receiver, got } = await receive(conn, { source: { address: a.address } }, a.count);
    receiver.close();
    conn.close();
    return { ...sent, received: got.length, in_order: got.every((m, i) => body(m) === `message ${i}`),
      durable: got.every((m) => !!m.durable) };
  },

  async selector() {
    const conn = await connect();
    const sent = await sendAll(conn, a.address, numbered(a.count, (i) => ({ color: i % 2 ? 'blue' : 'red' })));
    const red = Math.ceil(a.count / 2);
    const sel = await receive(conn, { source: { address: a.address, filter: rhea.filter.selector("color = 'red'") } }, red);
    sel.receiver.close();
    const rest = await receive(conn, { source: { address: a.address } }, a.count - red);
    rest.receiver.close();
    conn.close();
    const colors = (ms) => [...new Set(ms.map((m) => m.application_properties.color))];
    return { ...sent, selected: sel.got.length, selected_colors: colors(sel.got),
      rest: rest.got.length, rest_colors: colors(rest.got) };
  },

  async browse() {
    const conn = await connect();
    const sent = await sendAll(conn, a.address, numbered(a.count));
    const seen = await receive(conn, { source: { address: a.address, distribution_mode: 'copy' } }, a.count);
    seen.receiver.close();
    const taken = await receive(conn, { source: { address: a.address } }, a.count);
    taken.receiver.close();
    conn.close();
    return { ...sent, browsed: seen.got.length, consumed_after_browse: taken.got.length };
  },

  async 'reply-to'() {
    const conn = await connect();
    const replies = conn.open_receiver({ source: { dynamic: true }, autoaccept: true });
    await opened(replies, 'receiver');
    const temporary = replies.source.address;
    const reply = new Promise((resolve) => replies.once('message', (ctx) => resolve(ctx.message)));
    await sendAll(conn, a.address, [{ body: 'ping', reply_to: temporary, correlation_id: 'request-1' }]);
    const { receiver, got } = await receive(conn, { source: { address: a.address } }, 1);
    receiver.close();
    const request = got[0];
    await sendAll(conn, request.reply_to, [{ body: 'pong', correlation_id: request.correlation_id }]);
    const answer = await reply;
    replies.close();
    conn.close();
    return { temporary_address: temporary, request_reply_to: request.reply_to, reply: body(answer),
      correlated: answer.correlation_id === 'request-1' };
  },

  async 'durable-subscription'() {
    const source = { address: a.address, durable: 2, expiry_policy: 'never' };
    const first = await connect();
    const sub = await opened(first.open_receiver({ name: a.subscription, source, autoaccept: true }), 'receiver');
    emit({ event: 'subscribed', subscription: a.subscription });
    await new Promise((resolve) => { sub.once('receiver_close', resolve); sub.detach(); });
    first.close();
    const publisher = await connect(`${a['container-id']}-publisher`);
    const published = numbered(a.count).map((m) => ({ ...m, subject: a.subject }));
    const sent = await sendAll(publisher, a.address, published);
    publisher.close();
    emit({ event: 'published while detached', ...sent });
    const second = await connect();
    const { receiver, got } = await receive(second, { name: a.subscription, source }, a.count);
    await new Promise((resolve) => { receiver.once('receiver_close', resolve); receiver.close(); });
    second.close();
    return { ...sent, received_after_reattach: got.length,
      in_order: got.every((m, i) => body(m) === `message ${i}`) };
  },

  async 'exactly-once'() {
    const conn = await connect();
    const target = { address: a.address, durable: 2, expiry_policy: 'never' };
    const sender = await opened(conn.open_sender({ name: a.subscription, target, rcv_settle_mode: 1,
      autosettle: false }), 'sender');
    const messages = numbered(a.count);
    let accepted = 0, settledByBrokerFirst = 0, i = 0;
    await new Promise((resolve) => {
      const pump = () => { while (i < messages.length && sender.sendable()) sender.send(messages[i++]); };
      sender.on('sendable', pump);
      sender.on('accepted', (ctx) => {
        accepted++;
        if (ctx.delivery.remote_settled) settledByBrokerFirst++;
        ctx.delivery.update(true);                      // now the sender settles
        if (accepted === messages.length) resolve();
      });
      pump();
    });
    const senderMode = sender.remote.attach.rcv_settle_mode;
    await new Promise((resolve) => { sender.once('sender_close', resolve); sender.detach(); });
    const receiver = await opened(conn.open_receiver({ source: { address: a.address }, rcv_settle_mode: 1,
      credit_window: a.count, autoaccept: true }), 'receiver');
    let received = 0, settledByBroker = 0;
    await new Promise((resolve) => {
      receiver.on('message', () => { received++; });
      receiver.on('settled', () => { settledByBroker++; if (settledByBroker === a.count) resolve(); });
    });
    const receiverMode = receiver.remote.attach.rcv_settle_mode;
    receiver.close();
    conn.close();
    return { sent: i, accepted, settled_by_broker_first: settledByBrokerFirst, sender_rcv_settle_mode: senderMode,
      received, settled_by_broker: settledByBroker, receiver_rcv_settle_mode: receiverMode };
  },

  async 'bad-selector'() {
    const conn = await connect();
    const receiver = conn.open_receiver({ source: { address: a.address, filter: rhea.filter.selector("color = = 'red'") } });
    // the broker answers the attach (with no source), then detaches the link with the error
    const error = await new Promise((resolve) => {
      receiver.once('receiver_error', (ctx) => resolve(ctx.receiver.error));
      receiver.once('receiver_close', (ctx) => resolve(ctx.receiver.error));
    });
    conn.close();
    return { refused: !!error, condition: error && error.condition, description: error && error.description,
      remote_source: receiver.remote.attach ? receiver.remote.attach.source || null : 'no attach' };
  },

  async priority() {
    const conn = await connect();
    const order = [];
    const listen = (name, credit, properties) => {
      const r = conn.open_receiver({ source: { address: a.address }, credit_window: 0, autoaccept: true, properties });
      r.on('message', () => order.push(name));
      return opened(r, 'receiver').then(() => { r.add_credit(credit); return r; });
    };
    const low = await listen('low', a.count, undefined);
    const high = await listen('high', Math.floor(a.count / 2), { 'rabbitmq:priority': 5 });
    // a round trip on the sending side's connection makes sure both flows arrived first
    const sent = await sendAll(conn, a.address, numbered(a.count));
    await new Promise((resolve) => { const t = setInterval(() => { if (order.length >= a.count) { clearInterval(t); resolve(); } }, 20); });
    low.close(); high.close();
    conn.close();
    return { ...sent, order };
  },

  async management() {
    const conn = await connect();
    const replyTo = `rhea-replies-${process.pid}`;
    const replies = await opened(conn.open_receiver({ source: { address: '$management' },
      target: { address: replyTo }, autoaccept: true }), 'receiver');
    const requests = await opened(conn.open_sender({ target: { address: '$management' } }), 'sender');
    const ask = (id, properties, requestBody) => new Promise((resolve) => {
      replies.once('message', (ctx) => resolve(ctx.message));
      requests.send({ message_id: id, reply_to: replyTo, application_properties: properties, body: requestBody });
    });
    const queue = { type: 'org.apache.qpid.Queue' };
    const created = await ask('create', { operation: 'CREATE', ...queue }, { name: a.address });
    const path = { index: 'object-path', key: a.address, ...queue };
    const read = await ask('read', { operation: 'READ', ...path });
    const deleted = await ask('delete', { operation: 'DELETE', ...path });
    const gone = await ask('read-again', { operation: 'READ', ...path });
    requests.close();
    replies.close();
    conn.close();
    const status = (m) => m.application_properties.statusCode;
    return { create: status(created), read: status(read), read_name: read.body && read.body.name,
      delete: status(deleted), read_after_delete: status(gone),
      correlated: [created, read, deleted, gone].map((m) => m.correlation_id).join(',') };
  },
};

async function main() {
  const run = scenarios[a.scenario];
  if (!run) throw new Error(`unknown scenario ${a.scenario}; there are ${Object.keys(scenarios).join(', ')}`);
  const timer = setTimeout(() => { emit({ scenario: a.scenario, error: `timed out after ${a.timeout} s` }); process.exit(1); },
    Number(a.timeout) * 1000);
  const result = await run();
  clearTimeout(timer);
  emit({ scenario: a.scenario, ok: true, ...result });
}

main().then(() => process.exit(0), (e) => { emit({ scenario: a.scenario, error: String(e && e.message || e) }); process.exit(1); });
