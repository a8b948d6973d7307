// AMQP over WebSocket from a real headless Chromium (Debian's, through playwright-core):
// a page runs two unmodified browser clients against DeltaMQ --
//   rhea (AMQP 1.0), its browser build rhea-umd.js, with the browser's own WebSocket;
//   @cloudamqp/amqp-client (AMQP 0-9-1), its AMQPWebSocketClient --
// on every WebSocket URL of the config (the WebSocket port, the HTTP port's /amqp path).
// Each client sends a message to a queue and receives it back, then leaves one more in a
// queue for the test to read over AMQP.
//
//   node websocket-check.mjs '<json config>'
//
// config: {chromium, rhea, amqpClient (file paths of the two libraries), urls: [{name, url}],
//          queues: {<name>: {rhea, rheaLeft, amqp091, amqp091Left}}, user, password, timeoutMs}
//
// The page comes from a made-up origin that playwright serves from those files; its
// WebSockets go to the broker for real.  The last line printed is "@@result <json>":
// {ok, results: {<name>: {rhea: {body, protocol}, amqp091: {body}}}, problems}.

import { readFileSync } from "node:fs";
import { chromium } from "playwright-core";
import { launchChromium, log, progress, step } from "./steps.mjs";

const config = JSON.parse(process.argv[2] || "{}");
const TIMEOUT = config.timeoutMs || 20000;
const ORIGIN = "http://deltamq-websocket.test";
const problems = [];

const PAGE = `<!doctype html>
<html><head><meta charset="utf-8"><title>AMQP over WebSocket</title>
<script src="/rhea-umd.js"></script>
<script type="module">
import { AMQPWebSocketClient } from "/amqp-websocket-client.mjs";

// rhea: send one message, wait for it to be accepted; then (unless leaveOnly) receive one
window.rheaSend = (url, address, body, leaveOnly, user, password) => new Promise((resolve, reject) => {
  let protocol = null;
  class Recording extends WebSocket {
    constructor(u, p) { super(u, p); this.addEventListener("open", () => { protocol = this.protocol; }); }
  }
  const container = rheaUmd.create_container({ id: "browser-" + Math.random().toString(16).slice(2) });
  const connection = container.connect({
    connection_details: container.websocket_connect(Recording)(url, ["amqp"]),
    username: user, password, reconnect: false,
  });
  connection.on("connection_error", (c) => reject(new Error("connection error " + JSON.stringify(c.connection.error))));
  connection.on("disconnected", (c) => reject(new Error("disconnected: " + (c.error ? c.error.message || c.error : "no error"))));
  const sender = connection.open_sender(address);
  let sent = false;
  sender.on("sendable", () => { if (!sent) { sent = true; sender.send({ body }); } });
  sender.on("rejected", (c) => reject(new Error("rejected " + JSON.stringify(c.delivery.remote_state))));
  sender.on("accepted", () => {
    if (leaveOnly) { connection.close(); resolve({ protocol }); return; }
    const receiver = connection.open_receiver(address);
    receiver.on("message", (c) => { connection.close(); resolve({ body: c.message.body, protocol }); });
  });
});

// amqp-client: publish with a confirm, then (unless leaveOnly) get it back
window.amqp091Send = async (url, queue, body, leaveOnly, user, password) => {
  const client = new AMQPWebSocketClient(url, "/", user, password, "browser 0-9-1");
  const connection = await client.connect();
  const channel = await connection.channel();
  await channel.confirmSelect();
  const q = await channel.queue(queue, { passive: true });
  await q.publish(body);
  let got = null;
  if (!leaveOnly) {
    for (let i = 0; i < 100 && !got; i++) {
      got = await q.get({ noAck: true });
      if (!got) await new Promise((r) => setTimeout(r, 50));
    }
  }
  await connection.close();
  return leaveOnly ? {} : { body: got ? got.bodyToString() : null };
};
window.ready = true;
</script></head><body><h1>AMQP over WebSocket</h1></body></html>`;

async function main() {
  let browser;
  const result = { ok: false, results: {}, problems };
  try {
    browser = await launchChromium(chromium, config.chromium);
    const context = await browser.newContext();
    const files = {
      "/index.html": [PAGE, "text/html"],
      "/rhea-umd.js": [readFileSync(config.rhea), "text/javascript"],
      "/amqp-websocket-client.mjs": [readFileSync(config.amqpClient), "text/javascript"],
    };
    await context.route(`${ORIGIN}/**`, (route) => {
      const found = files[new URL(route.request().url()).pathname];
      if (!found) return route.fulfill({ status: 404, body: "not here" });
      return route.fulfill({ status: 200, contentType: found[1], body: found[0] });
    });
    const page = await context.newPage();
    page.setDefaultTimeout(TIMEOUT);
    page.on("pageerror", (err) => problems.push(`uncaught: ${err.message}`));
    page.on("console", (msg) => { if (msg.type() === "error") problems.push(`console: ${msg.text()}`); });

    step("the page loads both clients");
    await page.goto(`${ORIGIN}/index.html`);
    await page.waitForFunction(() => window.ready === true && typeof rheaUmd === "object");

    const call = (fn, args) => page.evaluate(([name, a]) => window[name](...a), [fn, args]);
    for (const { name, url } of config.urls) {
      const queues = config.queues[name];
      const found = (result.results[name] = {});
      step(`${name}: rhea sends and receives over ${url}`);
      found.rhea = await call("rheaSend", [url, queues.rhea, `rhea via ${name}`, false, config.user, config.password]);
      step(`${name}: rhea leaves a message in ${queues.rheaLeft}`);
      await call("rheaSend", [url, queues.rheaLeft, `left by rhea via ${name}`, true, config.user, config.password]);
      step(`${name}: amqp-client publishes and gets over ${url}`);
      found.amqp091 = await call("amqp091Send", [url, queues.amqp091, `amqp-client via ${name}`, false, config.user, config.password]);
      step(`${name}: amqp-client leaves a message in ${queues.amqp091Left}`);
      await call("amqp091Send", [url, queues.amqp091Left, `left by amqp-client via ${name}`, true, config.user, config.password]);
    }
    if (problems.length) throw new Error(`the page reported errors: ${problems.join("; ")}`);
    result.ok = true;
  } catch (err) {
    result.step = progress.step;
    result.error = err.message;
  } finally {
    if (browser) await browser.close();
  }
  log(`@@result ${JSON.stringify(result)}`);
  process.exit(result.ok ? 0 : 1);
}

main();
