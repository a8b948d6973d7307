// Drives a broker with amqplib exactly as an application would, and prints one
// JSON line of what it observed; the Python test asserts on that line.
'use strict';
const amqp = require('amqplib');

async function main(url) {
  const seen = {};
  const conn = await amqp.connect(url);
  seen.serverProduct = conn.connection.serverProperties.product;
  const ch = await conn.createConfirmChannel();
  const ex = 'node.topic.' + process.pid;
  await ch.assertExchange(ex, 'topic', { durable: false, autoDelete: true });
  const q = (await ch.assertQueue('', { exclusive: true })).queue;
  await ch.bindQueue(q, ex, 'orders.*');
  for (let i = 0; i < 100; i++) {
    ch.publish(ex, 'orders.created', Buffer.from('m' + i), { headers: { n: i }, contentType: 'text/plain' });
  }
  await ch.waitForConfirms();
  ch.publish(ex, 'nobody.listens', Buffer.from('lost'), { mandatory: true });
  const returned = await new Promise((resolve) => ch.once('return', (msg) => resolve(msg.fields.replyText)));
  seen.returned = returned;
  await ch.prefetch(10);
  const bodies = [];
  await new Promise((resolve) => {
    ch.consume(q, (msg) => {
      bodies.push(msg.content.toString());
      if (msg.properties.headers.n % 2 === 0) ch.ack(msg); else ch.nack(msg, false, false);
      if (bodies.length === 100) resolve();
    });
  });
  seen.bodiesInOrder = bodies.every((b, i) => b === 'm' + i);
  seen.count = bodies.length;
  // a channel error closes only that channel: use a channel of its own
  const probe = await conn.createChannel();
  probe.on('error', () => {});
  try {
    await probe.checkQueue('no-such-queue-' + process.pid);
    seen.passiveMissing = 'no error';
  } catch (err) {
    seen.passiveMissing = err.code;
  }
  seen.stillUsable = (await ch.checkQueue(q)).queue === q;
  await conn.close();
  console.log(JSON.stringify(seen));
}

main(process.argv[2]).catch((err) => { console.error(err); process.exit(1); });
