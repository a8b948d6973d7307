// Drives DeltaMQ's web console in a real headless Chromium (Debian's, through
// playwright-core), as a person would: by labels, roles and button texts.
//
//   node console-check.mjs '<json config>'
//
// config: {url, user, password, chromium, screenshot, queue, target, exchange,
//          connectionName, consumedQueue, consumerTag, timeoutMs}; with mode "operations"
//          the operator's pages instead: {tag, bidiQueue, bidiShown, bodyShown, depth,
//          version, newUser, newPassword, newVhost, amqpPort}; with mode "replay" the replay
//          form (see runReplay)
//
// tests/mgmt/test_console_browser.py runs it.  At checkpoints the script prints
// "@@checkpoint <json>" on stdout and waits for a line on stdin: "ok" to go on,
// anything else to stop -- so the test can check over AMQP what the page did.
// The last line it prints is "@@result <json>".  It exits 0 only when every step
// passed; a failure prints the step, the reason and the page's notices.

import { createInterface } from "node:readline";
import { chromium } from "playwright-core";
import { launchChromium, log, progress, step, waiting } from "./steps.mjs";

const config = JSON.parse(process.argv[2] || "{}");
const TIMEOUT = config.timeoutMs || 15000;
const { until, textOf, expectText } = waiting(TIMEOUT);
const problems = [];            // errors the page itself reported (uncaught, console.error)
const dialogs = [];

const stdinLines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

async function checkpoint(name, data = {}) {
  log(`@@checkpoint ${JSON.stringify({ name, ...data })}`);
  const { value, done } = await stdinLines.next();
  if (done || value.trim() !== "ok") {
    throw new Error(`the test stopped at checkpoint ${name}: ${done ? "stdin closed" : value}`);
  }
}


async function visible(locator, what) {
  await locator.waitFor({ state: "visible", timeout: TIMEOUT }).catch(() => {
    throw new Error(`${what} is not visible`);
  });
}

async function gone(locator, what) {
  await locator.waitFor({ state: "detached", timeout: TIMEOUT }).catch(() => {
    throw new Error(`${what} is still there`);
  });
}

// The REST API as a script would use it (Basic auth): what the page did, seen from outside.
async function api(path) {
  const auth = Buffer.from(`${config.user}:${config.password}`).toString("base64");
  const response = await fetch(`${config.url}/api/latest/${path}`, { headers: { Authorization: `Basic ${auth}` } });
  if (!response.ok) throw new Error(`GET ${path}: ${response.status} ${await response.text()}`);
  return response.json();
}

async function run(page) {
  const vhostPath = "default/default";
  const { queue, target, exchange } = config;
  const status = page.getByTestId("status");
  const error = page.getByTestId("error");
  const queueRow = (name) => page.locator(`[data-testid="queue-row"][data-queue="${name}"]`);
  const depthOf = (name) => queueRow(name).locator('[data-field="depth"]');
  const queueForm = page.getByTestId("queue-form");
  const publishForm = page.getByTestId("publish-form");

  step("the page loads and asks for a login");
  const response = await page.goto(config.url);
  if (!response || response.status() !== 200) throw new Error(`GET / answered ${response && response.status()}`);
  await visible(page.getByRole("heading", { name: "Log in" }), "the login form");
  if (await page.locator("#console").isVisible()) throw new Error("the console shows before logging in");

  step("a wrong password is refused, with the API's reason");
  await page.getByLabel("User name", { exact: true }).fill(config.user);
  await page.getByLabel("Password", { exact: true }).fill(`${config.password}-wrong`);
  await page.getByRole("button", { name: "Log in" }).click();
  await expectText(page.getByTestId("login-error"), /^Login failed: .+/, "the login error");

  step("logging in through the form");
  await page.getByLabel("Password", { exact: true }).fill(config.password);
  await page.getByRole("button", { name: "Log in" }).click();
  await visible(page.getByRole("tab", { name: "Queues" }), "the console");
  await expectText(page.getByTestId("user-name"), `Logged in as ${config.user}`, "the user shown");
  const cookies = await page.context().cookies();
  const session = cookies.find((c) => c.name === "DELTAMQ_SESSION" && c.httpOnly);
  if (!session) {
    throw new Error(`no HttpOnly session cookie after logging in: ${JSON.stringify(cookies.map((c) => c.name))}`);
  }

  step("the session cookie alone (a forged request) changes nothing");
  const forged = await fetch(`${config.url}/api/latest/queue/${vhostPath}`, {
    method: "POST",
    headers: { Cookie: `DELTAMQ_SESSION=${session.value}`, "Content-Type": "application/json" },
    body: JSON.stringify({ name: `${queue}.forged` }),
  });
  const refusal = await forged.json();
  if (forged.status !== 403 || !/X-DeltaMQ-CSRF/.test(refusal.errorMessage || "")) {
    throw new Error(`a POST with the cookie and no CSRF token answered ${forged.status} ${JSON.stringify(refusal)}`);
  }

  step("the overview lists the virtual host");
  await visible(page.locator('[data-testid="vhost-row"][data-vhost="default"]'), "the default virtual host");

  step("creating two queues");
  await page.getByRole("tab", { name: "Queues" }).click();
  for (const name of [queue, target]) {
    await queueForm.getByLabel("Name", { exact: true }).fill(name);
    await page.getByRole("button", { name: "Add queue" }).click();
    await expectText(status, `Queue ${name} created.`, "the status");
    await visible(queueRow(name), `the row of queue ${name}`);
    await expectText(depthOf(name), "0", `the depth of ${name}`);
  }
  const created = await api(`queue/${vhostPath}/${encodeURIComponent(queue)}`);
  if (created.name !== queue) throw new Error(`the API does not have queue ${queue}`);

  step("an error from the API is shown (the queue exists already)");
  await queueForm.getByLabel("Name", { exact: true }).fill(queue);
  await page.getByRole("button", { name: "Add queue" }).click();
  await expectText(error, /already has a queue named/i, "the error shown");

  step("publishing a message to the first queue");
  await page.getByRole("tab", { name: "Publish" }).click();
  await until("the default exchange among the choices",
    () => page.locator('#publish-exchange option[value=""]').count());
  await publishForm.getByLabel("Exchange", { exact: true }).selectOption("");
  await page.getByLabel("Routing key", { exact: true }).fill(queue);
  await page.getByLabel("Content type", { exact: true }).fill("text/plain");
  await page.getByLabel("Headers (JSON object, optional)", { exact: true }).fill('{"source": "console-test"}');
  await page.getByLabel("Body", { exact: true }).fill(config.body);
  await page.getByRole("button", { name: "Publish" }).click();
  await expectText(status, /delivered to 1 queue\.$/, "the status after publishing");

  step("the queue's depth becomes 1 on the page");
  await page.getByRole("tab", { name: "Queues" }).click();
  await expectText(depthOf(queue), "1", `the depth of ${queue}`);
  await checkpoint("published", { queue });

  step("browsing the queue's messages");
  await page.getByRole("button", { name: `Browse the messages of ${queue}` }).click();
  await expectText(page.getByTestId("browser-queue"), queue, "the queue browsed");
  const rows = page.getByTestId("message-row");
  await until("one message listed", async () => (await rows.count()) === 1);
  const messageId = await rows.first().getAttribute("data-message-id");
  await rows.first().getByRole("button", { name: /^View the body of message/ }).click();
  await expectText(page.getByTestId("message-content"), config.body, "the body shown");

  step("moving the message to the other queue");
  await page.getByRole("checkbox", { name: `Select message ${messageId}`, exact: true }).check();
  await page.getByLabel("Move selected messages to", { exact: true }).selectOption(target);
  await page.getByRole("button", { name: "Move selected" }).click();
  await expectText(status, `Moved 1 message from ${queue} to ${target}.`, "the status after moving");
  await visible(page.getByText("This queue has no ready messages."), "the empty message list");
  await expectText(depthOf(queue), "0", `the depth of ${queue} after the move`);
  await expectText(depthOf(target), "1", `the depth of ${target} after the move`);
  await checkpoint("moved", { queue, target });

  step("deleting the first queue");
  await page.getByRole("button", { name: `Delete queue ${queue}` }).click();
  await expectText(status, `Queue ${queue} deleted.`, "the status after deleting");
  await gone(queueRow(queue), `the row of queue ${queue}`);
  await checkpoint("deleted", { queue });

  step("an exchange, a binding, and a message routed through them");
  await page.getByRole("tab", { name: "Exchanges" }).click();
  await page.getByTestId("exchange-form").getByLabel("Name", { exact: true }).fill(exchange);
  await page.getByLabel("Type", { exact: true }).selectOption("topic");
  await page.getByRole("button", { name: "Add exchange" }).click();
  await expectText(status, `Exchange ${exchange} created.`, "the status after adding the exchange");
  const exchangeRow = page.locator(`[data-testid="exchange-row"][data-exchange="${exchange}"]`);
  await visible(exchangeRow, "the new exchange's row");
  await until("the new queue among the queues to bind",
    () => page.locator(`#bind-queue option[value="${target}"]`).count());
  const bindForm = page.getByTestId("bind-form");
  await bindForm.getByLabel("Exchange", { exact: true }).selectOption(exchange);
  await bindForm.getByLabel("Queue", { exact: true }).selectOption(target);
  await page.getByLabel("Binding key", { exact: true }).fill("console.#");
  await page.getByRole("button", { name: "Bind", exact: true }).click();
  await expectText(status, `Bound ${target} to ${exchange} with key "console.#".`, "the status after binding");
  await visible(exchangeRow.locator(`[data-testid="binding"][data-destination="${target}"]`), "the binding");
  await page.getByRole("tab", { name: "Publish" }).click();
  await until("the new exchange among the choices",
    () => page.locator(`#publish-exchange option[value="${exchange}"]`).count());
  await publishForm.getByLabel("Exchange", { exact: true }).selectOption(exchange);
  await page.getByLabel("Routing key", { exact: true }).fill("console.routed");
  await page.getByLabel("Body", { exact: true }).fill("routed by the console");
  await page.getByRole("button", { name: "Publish" }).click();
  await expectText(status, /delivered to 1 queue\.$/, "the status after publishing through the exchange");
  await page.getByLabel("Routing key", { exact: true }).fill("elsewhere");
  await page.getByRole("button", { name: "Publish" }).click();
  await expectText(error, /no queue received it/, "the unroutable warning");
  await page.getByRole("tab", { name: "Queues" }).click();
  await expectText(depthOf(target), "2", `the depth of ${target} after routing`);
  await page.getByRole("tab", { name: "Exchanges" }).click();
  await page.getByRole("button", { name: `Delete exchange ${exchange}` }).click();
  await gone(exchangeRow, "the deleted exchange's row");

  step("the consumers of a queue, each naming its connection");
  const connections = await api(`virtualhost/${vhostPath}/getConnections`);
  const client = connections.find((c) => c.clientId === config.connectionName);
  if (!client) throw new Error(`getConnections does not list ${config.connectionName}`);
  await page.getByRole("tab", { name: "Queues" }).click();
  await page.getByRole("button", { name: `Browse the messages of ${config.consumedQueue}` }).click();
  await expectText(page.getByTestId("consumers-queue"), config.consumedQueue, "the queue whose consumers are shown");
  const consumerRow = page.locator(`[data-testid="consumer-row"][data-consumer="${config.consumerTag}"]`);
  await visible(consumerRow, `the consumer ${config.consumerTag}`);
  await expectText(consumerRow.locator('[data-field="connection"]'), client.name, "the consumer's connection");
  await expectText(consumerRow.locator('[data-field="ack"]'), "manual", "the consumer's acknowledgement mode");

  step("closing the client's connection");
  await page.getByRole("tab", { name: "Connections" }).click();
  const connectionRow = page.locator(`[data-testid="connection-row"][data-client-id="${config.connectionName}"]`);
  await visible(connectionRow, `the connection ${config.connectionName}`);
  await connectionRow.getByRole("button", { name: /^Close connection/ }).click();
  await expectText(status, /^Connection .+ closed\.$/, "the status after closing");
  await gone(connectionRow, "the closed connection's row");
  await checkpoint("closed", { connectionName: config.connectionName });

  step("a screenshot of the queues, browsing the second one");
  await page.getByRole("tab", { name: "Queues" }).click();
  await page.getByRole("button", { name: `Browse the messages of ${target}` }).click();
  await until("two messages listed", async () => (await rows.count()) === 2);
  await rows.nth(1).getByRole("button", { name: /^View the body of message/ }).click();
  await expectText(page.getByTestId("message-content"), "routed by the console", "the routed body");
  await page.screenshot({ path: config.screenshot, fullPage: true });

  step("logging out ends the session");
  await page.getByRole("button", { name: "Log out" }).click();
  await visible(page.getByRole("heading", { name: "Log in" }), "the login form after logging out");
  await page.reload();
  await visible(page.getByRole("heading", { name: "Log in" }), "the login form after reloading");
}

// The operator's pages (config.mode "operations"): a page opened with credentials in its
// address, the charts, node health, users, virtual hosts, ports, and names and bodies
// with bidirectional-control characters shown as <U+...> markers.
async function runOperations(page) {
  const { tag, bidiQueue, bidiShown, bodyShown } = config;
  const status = page.getByTestId("status");

  step("a page opened with credentials in its address logs in through its form");
  const address = new URL(config.url);
  address.username = config.user;
  address.password = config.password;
  await page.goto(address.href);
  await visible(page.getByRole("heading", { name: "Log in" }), "the login form");
  await page.getByLabel("User name", { exact: true }).fill(config.user);
  await page.getByLabel("Password", { exact: true }).fill(config.password);
  await page.getByRole("button", { name: "Log in" }).click();
  await expectText(page.getByTestId("user-name"), `Logged in as ${config.user}`, "the user shown");
  await visible(page.getByRole("tab", { name: "Node health" }), "the console");

  step("the message-rate and depth charts draw what the broker measures");
  await checkpoint("traffic", {});
  const rateChart = page.getByTestId("rate-chart");
  await until("a published rate above 0 in the rate chart", async () => {
    const points = Number(await rateChart.getAttribute("data-points"));
    const last = (await rateChart.getAttribute("data-last") || "0,0").split(",").map(Number);
    return points >= 2 && last[0] > 0 && (await rateChart.locator("polyline").count()) === 2;
  }, 30000);
  const depthChart = page.getByTestId("depth-chart");
  await until(`at least ${config.depth} messages in the depth chart`, async () =>
    Number(await depthChart.getAttribute("data-last")) >= config.depth);
  await checkpoint("charted", {});
  if (config.chartsScreenshot) await page.screenshot({ path: config.chartsScreenshot, fullPage: true });

  step("names and bodies show bidirectional controls as markers");
  await page.getByRole("tab", { name: "Queues" }).click();
  const row = page.locator(`[data-testid="queue-row"][data-queue="${bidiQueue}"]`);
  await expectText(row.locator("code"), bidiShown, "the queue's name");
  await page.getByRole("button", { name: `Browse the messages of ${bidiShown}` }).click();
  await expectText(page.getByTestId("browser-queue"), bidiShown, "the queue browsed");
  await page.getByTestId("message-row").first().getByRole("button", { name: /^View the body/ }).click();
  await expectText(page.getByTestId("message-content"), bodyShown, "the body shown");
  const raw = await page.evaluate(() => /[\u202A-\u202E\u2066-\u2069\u200E\u200F]/.test(document.body.innerText));
  if (raw) throw new Error("a bidirectional-control character is in the page's text");

  step("node health: memory, descriptors, alarms, the journal");
  await page.getByRole("tab", { name: "Node health" }).click();
  const figure = (field) => page.locator(`[data-testid="node-health"] [data-field="${field}"]`);
  await expectText(figure("version"), `DeltaMQ ${config.version}`, "the version");
  await expectText(figure("memory"), /^[0-9.]+ MiB \(high watermark .+\)$/, "the memory");
  await expectText(figure("descriptors"), /^[0-9,]+ open of [0-9,]+$/, "the descriptors");
  await expectText(figure("alarms"), "none", "the alarms");
  const journal = page.locator('[data-testid="journal-row"][data-vhost="default"]');
  await until("journal commits shown", async () =>
    Number((await textOf(journal.locator('[data-field="commits"]'))).replace(/,/g, "")) >= 1);
  await expectText(journal.locator('[data-field="latency"]'), /^[0-9.]+ ms$/, "the mean commit latency");
  await expectText(journal.locator('[data-field="pending"]'), /^[0-9,]+$/, "the pending rows");

  if (config.healthScreenshot) await page.screenshot({ path: config.healthScreenshot, fullPage: true });

  step("users: add one, then delete it");
  await page.getByRole("tab", { name: "Users" }).click();
  await visible(page.locator('[data-testid="user-row"][data-user="guest"]'), "guest");
  await page.getByLabel("New user's name", { exact: true }).fill(config.newUser);
  await page.getByLabel("New user's password", { exact: true }).fill(config.newPassword);
  await page.getByRole("button", { name: "Add user" }).click();
  await expectText(status, `User ${config.newUser} added.`, "the status after adding the user");
  const userRow = page.locator(`[data-testid="user-row"][data-user="${config.newUser}"]`);
  await expectText(userRow.locator('[data-field="vhosts"]'), "all", "the new user's virtual hosts");
  await checkpoint("user-added", {});
  await page.getByRole("button", { name: `Delete user ${config.newUser}` }).click();
  await gone(userRow, "the deleted user's row");
  await checkpoint("user-deleted", {});

  step("virtual hosts: add one, then delete it");
  await page.getByRole("tab", { name: "Virtual hosts" }).click();
  await visible(page.locator('[data-testid="node-row"][data-node="default"]'), "the default node");
  await page.getByLabel("Virtual host name", { exact: true }).fill(config.newVhost);
  await page.getByLabel("Store", { exact: true }).selectOption("memory");
  await page.getByRole("button", { name: "Add virtual host" }).click();
  const nodeRow = page.locator(`[data-testid="node-row"][data-node="${config.newVhost}"]`);
  await expectText(nodeRow.locator('[data-field="state"]'), "ACTIVE", "the new virtual host's state");
  await until("the new virtual host in the header's choice",
    () => page.locator("#vhost-select option").filter({ hasText: config.newVhost }).count());
  await checkpoint("vhost-added", {});
  await page.getByRole("button", { name: `Delete virtual host node ${config.newVhost}` }).click();
  await gone(nodeRow, "the deleted virtual host's row");

  step("ports: both listen where the broker was told");
  await page.getByRole("tab", { name: "Ports" }).click();
  await expectText(page.locator('[data-testid="port-row"][data-port="AMQP"] [data-field="listening"]'),
    `*:${config.amqpPort}`, "where AMQP listens");
  await expectText(page.locator('[data-testid="port-row"][data-port="HTTP"] [data-field="listening"]'),
    `*:${new URL(config.url).port}`, "where HTTP listens");
  await page.screenshot({ path: config.screenshot, fullPage: true });
  log(`tag ${tag}`);
}

// Time-travel replay (config.mode "replay"): the replay form under a queue's messages, into
// a queue by time and through an exchange by journal version.  config: {queue, target,
// fromTime, toTime, fromVersion, exchange, routingKey, expected, expectedByVersion}.
async function runReplay(page) {
  const { queue, target } = config;
  const status = page.getByTestId("status");
  const replayed = (count) => new RegExp(`^Replayed ${count} messages? of .+ \\(journal version \\d+\\)\\.$`);

  step("logging in");
  await page.goto(config.url);
  await page.getByLabel("User name", { exact: true }).fill(config.user);
  await page.getByLabel("Password", { exact: true }).fill(config.password);
  await page.getByRole("button", { name: "Log in" }).click();
  await visible(page.getByRole("tab", { name: "Queues" }), "the console");

  step("opening the replay form of the queue");
  await page.getByRole("tab", { name: "Queues" }).click();
  await page.getByRole("button", { name: `Browse the messages of ${queue}` }).click();
  await expectText(page.getByTestId("browser-queue"), queue, "the queue browsed");
  await page.getByText("Replay this queue's history from the journal").click();
  const form = page.getByTestId("replay-form");
  await visible(form, "the replay form");

  step("replaying a time range into another queue");
  await form.getByLabel("Replay from", { exact: true }).fill(config.fromTime);
  await form.getByLabel("Replay to", { exact: true }).fill(config.toTime);
  await form.getByLabel("Replay into", { exact: true }).selectOption("queue");
  await until("the target queue among the choices",
    () => page.locator(`#replay-queue option[value="${target}"]`).count());
  await form.getByLabel("Replay into queue", { exact: true }).selectOption(target);
  await form.getByRole("button", { name: "Replay" }).click();
  await expectText(status, replayed(config.expected), "the status after replaying");
  await expectText(page.getByTestId("replay-result"), replayed(config.expected), "the replay's result");
  await checkpoint("replayed-by-time", {});

  step("replaying journal versions through an exchange with a routing key");
  await form.getByLabel("Replay from", { exact: true }).fill(String(config.fromVersion));
  await form.getByLabel("Replay to", { exact: true }).fill("");
  await form.getByLabel("Replay into", { exact: true }).selectOption("exchange");
  await until("the exchange among the choices",
    () => page.locator(`#replay-exchange option[value="${config.exchange}"]`).count());
  await form.getByLabel("Replay through exchange", { exact: true }).selectOption(config.exchange);
  await form.getByLabel("Replay with routing key", { exact: true }).fill(config.routingKey);
  await form.getByRole("button", { name: "Replay" }).click();
  await expectText(status, replayed(config.expectedByVersion), "the status after the second replay");
  await checkpoint("replayed-by-version", {});
  if (config.screenshot) await page.screenshot({ path: config.screenshot, fullPage: true });
}

async function main() {
  let browser;
  let page;
  const result = { ok: false, problems, dialogs };
  try {
    browser = await launchChromium(chromium, config.chromium);
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    page = await context.newPage();
    page.setDefaultTimeout(TIMEOUT);
    page.on("pageerror", (err) => problems.push(`uncaught: ${err.message}`));
    page.on("console", (msg) => {
      // the API's 401 (wrong password, no session yet) and 409 (the queue exists) are
      // expected: the steps check what the page made of them; any other error is not
      if (msg.type() === "error" && !/status of 40[19] /.test(msg.text())) problems.push(`console: ${msg.text()}`);
    });
    page.on("requestfailed", (req) => {
      // a refresh still in flight when the page is reloaded is aborted: not a failure
      const reason = req.failure()?.errorText || "";
      if (!reason.includes("ERR_ABORTED")) problems.push(`request failed: ${req.url()} ${reason}`);
    });
    page.on("dialog", (dialog) => { dialogs.push(dialog.message()); dialog.accept(); });
    const modes = { operations: runOperations, replay: runReplay };
    await (modes[config.mode] || run)(page);
    if (problems.length) throw new Error(`the page reported errors: ${problems.join("; ")}`);
    result.ok = true;
  } catch (err) {
    result.step = progress.step;
    result.error = err.message;
    if (page) {
      try {
        result.notices = await page.evaluate(() => ["error", "status", "login-error"]
          .map((id) => document.getElementById(id))
          .filter((el) => el && !el.hidden).map((el) => `${el.id}: ${el.textContent}`));
        if (config.failureScreenshot) await page.screenshot({ path: config.failureScreenshot, fullPage: true });
      } catch (_) { /* the page is gone */ }
    }
  } finally {
    if (browser) await browser.close();
  }
  log(`@@result ${JSON.stringify(result)}`);
  process.exit(result.ok ? 0 : 1);
}

main();
