// One side of the AMQP 1.0 benchmark's load (bench/amqp1_0_load.py), on rhea.
//
//   node load.js sender|receiver CONTROL_FILE key=value...
//
// The parent steers it through CONTROL_FILE, a block of little-endian int64 slots
// (the layout is bench/amqp1_0_load.py's CONTROL), read and written every 1 ms:
// it sets the phase, the paced rate and whether latencies are recorded; this
// process writes its counters there.  Every message: `size` bytes in one
// data section, the first 8 the sender's CLOCK_MONOTONIC in ns at the write
// (process.hrtime.bigint()), the same clock the receiver reads; durable=true in
// the header when durable=1.  The sender sends unsettled (at-least-once)
// and counts `accepted` outcomes, with at most `window` deliveries
// unsettled; the receiver grants `credit` and accepts every delivery.
'use strict';

const fs = require('fs');
const rhea = require('rhea');

const [role, ctlPath, ...options] = process.argv.slice(2);
// host, port, user, password, address, size, window, credit, durable (0/1), samples,
// hostname (optional): see Generator.options in bench/amqp1_0_load.py
const o = {};
for (const kv of options) {
  const i = kv.indexOf('=');
  const v = kv.slice(i + 1);
  o[kv.slice(0, i)] = /^-?[0-9]+$/.test(v) ? Number(v) : v;
}

// control slots: keep in step with CONTROL in bench/amqp1_0_load.py
const PHASE = 0, RATE = 1, RECORD = 2, SENT = 3, ACCEPTED = 4, RECEIVED = 5,
  READY_SENDER = 6, READY_RECEIVER = 7, BACKLOG = 8, OTHER_OUTCOMES = 9, BEHIND_MS = 10;
const RUN_MAX = 1, RUN_RATE = 3, STOP = 4;
const SLOTS = 16;

const fd = fs.openSync(ctlPath, 'r+');
const ctl = Buffer.alloc(SLOTS * 8);
const one = Buffer.alloc(8);
const readControl = () => fs.readSync(fd, ctl, 0, ctl.length, 0);
const slot = (i) => Number(ctl.readBigInt64LE(i * 8));
const put = (i, v) => { one.writeBigInt64LE(BigInt(v)); fs.writeSync(fd, one, 0, 8, i * 8); };

function fail(what) {
  process.stderr.write(`${role}: ${what}\n`);
  try { put(role === 'sender' ? READY_SENDER : READY_RECEIVER, -1); } catch (e) { /* closing */ }
  process.exit(1);
}

const connectOptions = {
  host: o.host, port: o.port, username: o.user, password: o.password,
  reconnect: false, container_id: `bench-${role}-${process.pid}`,
};
if (o.hostname) connectOptions.hostname = o.hostname;
const container = rhea.create_container();
const conn = container.connect(connectOptions);
conn.on('connection_open', (ctx) => { if (ctx.connection.socket) ctx.connection.socket.setNoDelay(true); });
conn.on('connection_error', (ctx) => fail(`connection error: ${JSON.stringify(ctx.connection.error)}`));
conn.on('disconnected', (ctx) => { if (phase !== STOP) fail(`disconnected: ${ctx.error || ''}`); });

let phase = 0;

if (role === 'sender') {
  const body = Buffer.alloc(o.size, 0x61);
  const template = rhea.message.encode({ durable: !!o.durable, body: rhea.message.data_section(body) });
  const stampAt = template.length - o.size;
  const sender = conn.open_sender({ target: { address: o.address }, snd_settle_mode: 0, autosettle: true });
  let sent = 0, accepted = 0, other = 0, received = 0, backlog = 0;
  let rateT0 = 0n, rateBase = 0, rate = 0, behindMs = 0;

  const sendOne = () => {
    const payload = Buffer.from(template);
    payload.writeBigInt64LE(process.hrtime.bigint(), stampAt);
    sender.send(payload, undefined, 0);
    sent += 1;
  };
  const pump = () => {
    if (phase === RUN_MAX) {
      while (sender.sendable() && sent - accepted - other < o.window && sent - received < backlog) sendOne();
    } else if (phase === RUN_RATE) {
      const due = Math.floor(Number(process.hrtime.bigint() - rateT0) / 1e9 * rate) - (sent - rateBase);
      let n = due;
      while (n > 0 && sender.sendable() && sent - accepted - other < o.window && sent - received < backlog) {
        sendOne();
        n -= 1;
      }
      if (n > 0 && rate > 0) behindMs = Math.max(behindMs, Math.round(n / rate * 1000));
    }
  };
  sender.on('sendable', pump);
  sender.on('accepted', () => { accepted += 1; if (phase === RUN_MAX) pump(); });
  for (const outcome of ['rejected', 'released', 'modified']) {
    sender.on(outcome, () => { other += 1; if (phase === RUN_MAX) pump(); });
  }
  sender.on('sender_error', (ctx) => fail(`sender error: ${JSON.stringify(ctx.sender.error)}`));
  sender.on('sender_open', () => put(READY_SENDER, 1));

  const timer = setInterval(() => {
    readControl();
    const p = slot(PHASE);
    received = slot(RECEIVED);
    backlog = slot(BACKLOG);
    if (p === RUN_RATE && phase !== RUN_RATE) {
      rateT0 = process.hrtime.bigint();
      rateBase = sent;
      rate = slot(RATE) / 1000;
    }
    phase = p;
    put(SENT, sent);
    put(ACCEPTED, accepted);
    put(OTHER_OUTCOMES, other);
    put(BEHIND_MS, behindMs);
    if (phase === STOP) {
      clearInterval(timer);
      conn.close();
      setTimeout(() => process.exit(0), 200);
    } else {
      pump();
    }
  }, 1);
} else if (role === 'receiver') {
  let received = 0, recording = false, n = 0;
  let samples = new Float64Array(1 << 16);
  const receiver = conn.open_receiver({ source: { address: o.address }, credit_window: o.credit, autoaccept: true });
  receiver.on('message', (ctx) => {
    received += 1;
    if (!recording) return;
    const body = ctx.message.body;
    const bytes = Buffer.isBuffer(body) ? body : body.content;
    const latency = Number(process.hrtime.bigint() - bytes.readBigInt64LE(0));
    if (n === samples.length) {
      const bigger = new Float64Array(samples.length * 2);
      bigger.set(samples);
      samples = bigger;
    }
    samples[n++] = latency;
  });
  receiver.on('receiver_error', (ctx) => fail(`receiver error: ${JSON.stringify(ctx.receiver.error)}`));
  receiver.on('receiver_open', () => put(READY_RECEIVER, 1));
  const timer = setInterval(() => {
    readControl();
    phase = slot(PHASE);
    recording = slot(RECORD) === 1;
    put(RECEIVED, received);
    if (phase === STOP) {
      clearInterval(timer);
      fs.writeFileSync(o.samples, Buffer.from(samples.buffer, 0, n * 8));
      conn.close();
      setTimeout(() => process.exit(0), 200);
    }
  }, 1);
} else {
  fail(`unknown role ${role}`);
}
