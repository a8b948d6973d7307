// An unmodified rhea client over WebSocket (rhea's websocket_connect with the `ws` package),
// for tests/integration/test_websocket.py: it sends `count` messages to `address`, waits
// for each to be accepted, then receives `count` from it and accepts them.
//
//   node rhea_websocket.js '{"url": "ws://127.0.0.1:5673/", "address": "q", "count": 10}'
//
// The last line it prints is {"ok": true, "protocol": <the subprotocol the broker chose>,
// "accepted": N, "received": [bodies]}, or {"error": ...} with exit code 1.
'use strict';

const rhea = require('rhea');
const WebSocket = require('ws');

const config = JSON.parse(process.argv[2] || '{}');
const count = Number(config.count || 10);
const emit = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const fail = (message) => { emit({ ok: false, error: String(message) }); process.exit(1); };
setTimeout(() => fail('timed out'), Number(config.timeoutMs || 60000)).unref();

const container = rhea.create_container({ id: `rhea-websocket-${process.pid}` });
let protocol = null;

// record the subprotocol the broker chose, as the `ws` socket reports it
class Recording extends WebSocket {
  constructor(url, protocols, options) {
    super(url, protocols, options);
    this.on('open', () => { protocol = this.protocol; });
  }
}

const connection = container.connect({
  connection_details: container.websocket_connect(Recording)(config.url, ['amqp'], {}),
  username: config.user || 'guest',
  password: config.password || 'guest',
  reconnect: false,
});

let accepted = 0;
let sent = 0;
const received = [];

connection.on('connection_error', (context) => fail(`connection error: ${JSON.stringify(context.connection.error)}`));
connection.on('disconnected', (context) => {
  if (received.length < count) fail(`disconnected: ${context.error || 'no error'}`);
});

const sender = connection.open_sender(config.address);
sender.on('sendable', () => {
  while (sender.sendable() && sent < count) {
    sender.send({ body: `rhea ${sent}` });
    sent += 1;
  }
});
sender.on('accepted', () => {
  accepted += 1;
  if (accepted === count) {
    const receiver = connection.open_receiver({ source: config.address, credit_window: 0,
      autoaccept: true });
    receiver.add_credit(count);
    receiver.on('message', (context) => {
      received.push(context.message.body);
      if (received.length === count) {
        emit({ ok: true, protocol, accepted, received });
        connection.close();
      }
    });
  }
});
sender.on('rejected', (context) => fail(`rejected: ${JSON.stringify(context.delivery.remote_state)}`));
connection.on('connection_close', () => process.exit(received.length === count ? 0 : 1));
