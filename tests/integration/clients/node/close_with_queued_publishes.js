// amqplib closes a connection while a channel still has publishes queued: its
// mux can put the connection's close on the wire before them, so they reach
// the broker after it answered close-ok.  Prints one JSON line: whether the
// close completed, and any error amqplib reported on the way.
'use strict';
const amqp = require('amqplib');

async function main(url, count, size) {
  const seen = { errors: [], closeResolved: false };
  // a close that never completes leaves Node nothing to wait for: say so on the way out
  process.once('beforeExit', () => { if (!seen.printed) console.log(JSON.stringify(seen)); });
  const conn = await amqp.connect(url);
  conn.on('error', (err) => seen.errors.push(String(err.code || err.message)));
  const ch = await conn.createChannel();
  ch.on('error', (err) => seen.errors.push(String(err.code || err.message)));
  const body = Buffer.alloc(size, 120);
  let buffered = 0;
  for (let i = 0; i < count; i++) {
    if (!ch.publish('', 'nobody-' + process.pid, body)) buffered++;
  }
  seen.publishesBuffered = buffered;
  const closing = new Promise((resolve) => conn.once('close', (err) => resolve(err ? String(err) : null)));
  try {
    await conn.close();
    seen.closeResolved = true;
  } catch (err) {
    seen.closeResolved = false;
    seen.errors.push('close: ' + String(err.code || err.message));
  }
  seen.closeEventError = await closing;
  seen.printed = true;
  console.log(JSON.stringify(seen));
}

main(process.argv[2], Number(process.argv[3] || 300), Number(process.argv[4] || 65536))
  .catch((err) => { console.error(err); process.exit(1); });
