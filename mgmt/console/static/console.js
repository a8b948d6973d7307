// DeltaMQ web console: plain JavaScript over the REST API (/api/latest), no framework.
//
// Logging in posts to /service/login, which sets an HttpOnly session cookie; every
// later request carries it.  The login's answer (and GET /service/session, after a
// reload) also gives the session's CSRF token, which every request that changes
// something sends back in the X-DeltaMQ-CSRF header: the broker refuses such a
// request with the cookie alone (a page elsewhere can make the browser send the
// cookie, but cannot read the token).  Requests say "X-Requested-With:
// XMLHttpRequest" so that a 401 comes back without a Basic challenge (no browser
// password pop-up): the console shows its own login form instead.  Everything the
// API returns is put in the page as text (textContent), never as HTML, with
// bidirectional-control characters shown as <U+202E>-style markers, so that a
// name cannot reorder what is shown around it.
//
// Requests go to location.origin, never to a URL relative to the page's: a page opened
// with credentials in its address (user:password@host:8080) keeps them in the base URL
// that relative URLs resolve against, and fetch() refuses a URL that carries credentials
// ("Request cannot be constructed from a URL that includes credentials").  Scripts
// cannot read those credentials (location.href leaves them out), so the console shows
// its login form as for any other address.
//
// console-pages.js adds the node health, users, virtual hosts and ports pages and the
// charts, through window.DeltaMQConsole (below).
"use strict";

(() => {
  const API = "/api/latest";
  const CSRF_HEADER = "X-DeltaMQ-CSRF";
  const SAFE_METHODS = new Set(["GET", "HEAD"]);
  const REFRESH_MS = 3000;
  const BROWSE_LIMIT = 100;          // messages listed by the message browser
  const QUEUE_ROWS = 500;            // queues listed at once (the filter finds the others)
  const CONTENT_LIMIT = 64 * 1024;   // bytes of a body shown

  const state = {
    node: null,           // the selected virtual host: its node ...
    vhost: null,          // ... and its name
    vhosts: [],           // [{node, vhost: representation}]
    queues: [],
    exchanges: [],
    tab: "overview",
    browsing: null,       // the queue whose messages are shown
    timer: null,
    refreshing: false,
    refreshAgain: false,  // asked for while a refresh was running
    loggedIn: false,
    user: null,           // who is logged in
    csrf: null,           // the session's CSRF token (null without a session cookie)
  };

  const $ = (id) => document.getElementById(id);

  // Bidirectional controls (LRE, RLE, PDF, LRO, RLO; LRI, RLI, FSI, PDI; LRM, RLM) made
  // visible: "<U+202E>" in place of the character itself.
  const BIDI_CONTROLS = /[\u202A-\u202E\u2066-\u2069\u200E\u200F]/g;

  function visibleControls(text) {
    return String(text).replace(BIDI_CONTROLS,
      (c) => `<U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}>`);
  }

  function show(el, text) {
    el.textContent = visibleControls(text);
  }

  // -- talking to the API --------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  const enc = encodeURIComponent;

  function vhostPath() {
    return `${enc(state.node)}/${enc(state.vhost)}`;
  }

  async function send(method, path, body) {
    const init = {
      method,
      credentials: "same-origin",
      headers: { "Accept": "application/json", "X-Requested-With": "XMLHttpRequest" },
    };
    if (!SAFE_METHODS.has(method) && state.csrf) init.headers[CSRF_HEADER] = state.csrf;
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    try {
      const url = new URL(path.startsWith("/") ? path : `${API}/${path}`, window.location.origin);
      return await fetch(url, init);
    } catch (err) {
      throw new ApiError(0, `The broker cannot be reached (${err.message}).`);
    }
  }

  // Who is logged in, and the session's CSRF token (null when no cookie session).
  async function loadSession() {
    const response = await send("GET", "/service/session");
    if (!response.ok) return false;
    const session = await response.json();
    state.user = session.user;
    state.csrf = session.csrfToken;
    return true;
  }

  async function request(method, path, body, { raw = false, quietAuth = false } = {}) {
    let response = await send(method, path, body);
    // the token no longer matches (another login replaced the cookie): fetch it, once more
    if (response.status === 403 && response.headers.get(CSRF_HEADER) === "required"
        && await loadSession()) {
      response = await send(method, path, body);
    }
    if (!response.ok) {
      let message = `${response.status} ${response.statusText}`;
      try {
        const data = await response.json();
        if (data && data.errorMessage) message = data.errorMessage;
      } catch (_) { /* not JSON: keep the status line */ }
      if (response.status === 401 && !quietAuth && state.loggedIn) {
        showLogin("Your session has ended: please log in again.");
      }
      throw new ApiError(response.status, message);
    }
    if (raw) return response;
    const text = await response.text();
    return text ? JSON.parse(text) : null;
  }

  const get = (path, options) => request("GET", path, undefined, options);
  const post = (path, body) => request("POST", path, body === undefined ? {} : body);

  // -- notices -----------------------------------------------------------------------------

  function showError(message) {
    const box = $("error");
    show(box, message);
    box.hidden = false;
    $("status").hidden = true;
  }

  function showStatus(message) {
    const box = $("status");
    show(box, message);
    box.hidden = false;
    $("error").hidden = true;
  }

  function clearNotices() {
    $("error").hidden = true;
    $("status").hidden = true;
  }

  // Runs a user's action: notices cleared, the button disabled meanwhile, errors shown.
  async function act(button, fn) {
    clearNotices();
    if (button) button.disabled = true;
    try {
      await fn();
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 401)) showError(err.message);
    } finally {
      if (button) button.disabled = false;
    }
  }

  // -- formatting ----------------------------------------------------------------------

  const integer = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
  const rate = new Intl.NumberFormat(undefined, { minimumFractionDigits: 1, maximumFractionDigits: 1 });

  function count(value) {
    return typeof value === "number" ? integer.format(value) : "–";
  }

  function perSecond(value) {
    return typeof value === "number" ? rate.format(value) : "–";
  }

  function bytes(value) {
    if (typeof value !== "number") return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let v = value;
    let i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
    return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
  }

  function duration(seconds) {
    if (typeof seconds !== "number") return "–";
    const s = Math.floor(seconds);
    const d = Math.floor(s / 86400);
    const h = Math.floor((s % 86400) / 3600);
    const m = Math.floor((s % 3600) / 60);
    if (d) return `${d} d ${h} h`;
    if (h) return `${h} h ${m} min`;
    if (m) return `${m} min`;
    return `${s} s`;
  }

  function when(milliseconds) {
    if (typeof milliseconds !== "number") return "–";
    return new Date(milliseconds).toLocaleString();
  }

  function yesNo(value) {
    return value ? "yes" : "no";
  }

  function stat(obj, name) {
    return obj && obj.statistics ? obj.statistics[name] : undefined;
  }

  // -- building the page ---------------------------------------------------------------

  function element(tag, attributes = {}, ...children) {
    const el = document.createElement(tag);
    for (const [key, value] of Object.entries(attributes)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "text") show(el, value);
      else if (key === "className") el.className = value;
      else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
      else if (key === "dataset") Object.assign(el.dataset, value);
      else if (key === "aria-label") el.setAttribute(key, visibleControls(value));
      else el.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children) {
      if (child !== null && child !== undefined) el.append(child);
    }
    return el;
  }

  function cell(text, { numeric = false, field } = {}) {
    return element("td", { className: numeric ? "num" : undefined, text, dataset: field ? { field } : undefined });
  }

  function button(label, onclick, { className, ariaLabel, testid } = {}) {
    return element("button", {
      type: "button", className, text: label, "aria-label": ariaLabel,
      "data-testid": testid, onclick,
    });
  }

  // Updates a table body in place, row by row (keyed), so focus and selection survive
  // the periodic refresh.  A changed row keeps its element and the cells whose text did
  // not change -- its buttons among them: a button replaced between a press and its
  // release (a refresh under the pointer) would never be clicked.
  function renderRows(tbody, items, key, build) {
    const existing = new Map();
    for (const row of tbody.rows) existing.set(row.dataset.key, row);
    let previous = null;
    for (const item of items) {
      const k = key(item);
      const fresh = build(item);
      fresh.dataset.key = k;
      const old = existing.get(k);
      let row = fresh;
      if (old) {
        existing.delete(k);
        if (old.dataset.signature === fresh.dataset.signature || patchRow(old, fresh)) {
          row = old;
        } else {
          old.replaceWith(fresh);
        }
      }
      const expected = previous ? previous.nextSibling : tbody.firstChild;
      if (row !== expected) tbody.insertBefore(row, expected);
      previous = row;
    }
    for (const row of existing.values()) row.remove();
  }

  // Brings row `old` up to `fresh` cell by cell; false when their shapes differ.
  function patchRow(old, fresh) {
    if (old.cells.length !== fresh.cells.length) return false;
    const freshCells = Array.from(fresh.cells);
    Array.from(old.cells).forEach((cellNow, i) => {
      const next = freshCells[i];
      if (cellNow.textContent !== next.textContent || cellNow.className !== next.className) {
        cellNow.replaceWith(next);
      }
    });
    old.className = fresh.className;
    old.dataset.signature = fresh.dataset.signature;
    return true;
  }

  // A row's signature: its text, so an unchanged row is kept as it is.
  function signed(row) {
    row.dataset.signature = row.textContent;
    return row;
  }

  function fillSelect(select, options, { keep = true } = {}) {
    const current = select.value;
    select.replaceChildren(...options.map(([value, label]) => element("option", { value, text: label })));
    if (keep && options.some(([value]) => value === current)) select.value = current;
  }

  // -- logging in and out ------------------------------------------------------------------

  function showLogin(message) {
    state.loggedIn = false;
    stopTimer();
    $("console").hidden = true;
    $("session").hidden = true;
    $("login").hidden = false;
    $("broker-summary").textContent = "";
    clearNotices();
    const error = $("login-error");
    show(error, message || "");
    error.hidden = !message;
    $("login-username").focus();
  }

  async function showConsole() {
    state.loggedIn = true;
    $("login").hidden = true;
    $("console").hidden = false;
    $("session").hidden = false;
    show($("user-name"), state.user ? `Logged in as ${state.user}` : "");
    await loadVirtualHosts();
    selectTab(state.tab);
    startTimer();
  }

  async function login(event) {
    event.preventDefault();
    const submit = $("login-submit");
    const error = $("login-error");
    error.hidden = true;
    submit.disabled = true;
    try {
      const reply = await request("POST", "/service/login", {
        username: $("login-username").value,
        password: $("login-password").value,
      }, { quietAuth: true });
      state.user = reply && reply.user ? reply.user : $("login-username").value;
      state.csrf = reply ? reply.csrfToken : null;
      $("login-password").value = "";
      await showConsole();
    } catch (err) {
      show(error, err.status === 401 ? `Login failed: ${err.message}` : err.message);
      error.hidden = false;
    } finally {
      submit.disabled = false;
    }
  }

  async function logout() {
    try {
      await request("POST", "/service/logout", undefined, { quietAuth: true });
    } catch (_) { /* logged out either way */ }
    state.user = null;
    state.csrf = null;
    closeBrowser();
    showLogin("");
  }

  // -- virtual hosts -------------------------------------------------------------------------

  async function loadVirtualHosts() {
    const nodes = await get("virtualhostnode?depth=1");
    const found = [];
    for (const node of nodes) {
      for (const vhost of node.virtualhosts || []) found.push({ node: node.name, vhost });
    }
    state.vhosts = found;
    const value = (node, name) => JSON.stringify([node, name]);
    if (!found.some((v) => v.node === state.node && v.vhost.name === state.vhost)) {
      const saved = sessionStorage.getItem("deltamq.vhost");
      const pick = found.find((v) => value(v.node, v.vhost.name) === saved) || found[0];
      state.node = pick ? pick.node : null;
      state.vhost = pick ? pick.vhost.name : null;
    }
    fillSelect($("vhost-select"), found.map((v) => [value(v.node, v.vhost.name),
      found.length > 1 || v.node !== v.vhost.name ? `${v.vhost.name} (${v.node})` : v.vhost.name]),
    { keep: false });
    $("vhost-select").value = value(state.node, state.vhost);
    renderVirtualHosts();
  }

  function renderVirtualHosts() {
    const tbody = $("vhosts-table").tBodies[0];
    renderRows(tbody, state.vhosts, (v) => JSON.stringify([v.node, v.vhost.name]), (v) => {
      const selected = v.node === state.node && v.vhost.name === state.vhost;
      const row = element("tr", { "data-testid": "vhost-row", "data-vhost": v.vhost.name,
        className: selected ? "selected" : undefined },
      cell(v.node), cell(v.vhost.name), cell(v.vhost.state),
      cell(count(stat(v.vhost, "connectionCount")), { numeric: true }),
      cell(count(stat(v.vhost, "queueCount")), { numeric: true }),
      cell(count(stat(v.vhost, "exchangeCount")), { numeric: true }),
      cell(count(stat(v.vhost, "totalDepthOfQueuesMessages")), { numeric: true }),
      cell(bytes(stat(v.vhost, "totalDepthOfQueuesBytes")), { numeric: true }),
      cell(perSecond(stat(v.vhost, "messagesInRate")), { numeric: true }),
      cell(perSecond(stat(v.vhost, "messagesOutRate")), { numeric: true }));
      signed(row);
      row.append(element("td", { className: "actions" },
        button("Show queues", () => { chooseVirtualHost(v.node, v.vhost.name); selectTab("queues"); },
          { className: "secondary", ariaLabel: `Show the queues of ${v.vhost.name}` })));
      return row;
    });
  }

  function chooseVirtualHost(node, name) {
    if (node === state.node && name === state.vhost) return;
    state.node = node;
    state.vhost = name;
    sessionStorage.setItem("deltamq.vhost", JSON.stringify([node, name]));
    $("vhost-select").value = JSON.stringify([node, name]);
    for (const id of ["queues-table", "exchanges-table", "connections-table"]) {
      $(id).tBodies[0].replaceChildren();
    }
    closeBrowser();
    renderVirtualHosts();
    refresh();
  }

  async function loadBrokerSummary() {
    const broker = await get("broker");
    const s = broker.statistics || {};
    show($("broker-summary"), `${broker.name} · up ${duration(s.uptime / 1000)} · `
      + `${count(s.connectionCount)} connection${s.connectionCount === 1 ? "" : "s"} · `
      + `in ${perSecond(s.messagesInRate)} msg/s · out ${perSecond(s.messagesOutRate)} msg/s`);
    for (const observe of SUMMARY_OBSERVERS) await observe(broker);
  }

  // -- queues --------------------------------------------------------------------------

  async function loadQueues() {
    if (!state.vhost) return;
    state.queues = await get(`queue/${vhostPath()}`);
    state.queues.sort((a, b) => a.name.localeCompare(b.name));
    renderQueues();
    fillQueueSelects();
    if (state.browsing && !state.queues.some((q) => q.name === state.browsing)) closeBrowser();
    else if (state.browsing && state.tab === "queues") await loadConsumers();
  }

  function renderQueues() {
    const filter = $("queue-filter").value.trim().toLowerCase();
    const matching = state.queues.filter((q) => !filter || q.name.toLowerCase().includes(filter));
    const shown = matching.slice(0, QUEUE_ROWS);
    renderRows($("queues-table").tBodies[0], shown, (q) => q.name, (q) => {
      const row = element("tr", { "data-testid": "queue-row", "data-queue": q.name },
        element("td", {}, element("code", { text: q.name })),
        cell(q.type || "standard"),
        cell(yesNo(q.durable)),
        cell(count(stat(q, "queueDepthMessages")), { numeric: true, field: "depth" }),
        cell(bytes(stat(q, "queueDepthBytes")), { numeric: true, field: "bytes" }),
        cell(count(stat(q, "unacknowledgedMessages")), { numeric: true, field: "unacked" }),
        cell(count(stat(q, "consumerCount")), { numeric: true, field: "consumers" }),
        cell(perSecond(stat(q, "messagesInRate")), { numeric: true, field: "in-rate" }),
        cell(perSecond(stat(q, "messagesOutRate")), { numeric: true, field: "out-rate" }));
      signed(row);
      row.append(element("td", { className: "actions" },
        button("Browse", () => openBrowser(q.name),
          { className: "secondary", ariaLabel: `Browse the messages of ${q.name}`, testid: "browse-queue" }),
        button("Delete", (event) => deleteQueue(q.name, event.currentTarget),
          { className: "danger", ariaLabel: `Delete queue ${q.name}`, testid: "delete-queue" })));
      return row;
    });
    $("queues-empty").hidden = shown.length > 0;
    $("queues-more").hidden = matching.length <= shown.length;
    $("queues-more").textContent = `Showing ${shown.length} of ${matching.length} queues: filter by name to find the others.`;
  }

  function fillQueueSelects() {
    const names = state.queues.map((q) => [q.name, q.name]);
    fillSelect($("bind-queue"), names);
    fillSelect($("move-destination"), names.filter(([name]) => name !== state.browsing));
  }

  async function createQueue(event) {
    event.preventDefault();
    await act(event.submitter || $("queue-create"), async () => {
      const name = $("queue-name").value.trim();
      if (!name) throw new Error("Give the queue a name.");
      const body = { name, durable: $("queue-durable").checked, autoDelete: $("queue-auto-delete").checked };
      const args = $("queue-arguments").value.trim();
      if (args) body.arguments = parseJsonObject(args, "Arguments");
      // POST to the parent creates, and answers 409 for a name in use (a PUT would update)
      await post(`queue/${vhostPath()}`, body);
      $("queue-name").value = "";
      $("queue-arguments").value = "";
      showStatus(`Queue ${name} created.`);
      await loadQueues();
    });
  }

  // The REST API reads a path name "*" as a wildcard: an object of that name cannot be
  // addressed alone, and a DELETE would reach every object of its kind.
  function addressable(name, what) {
    if (name !== "*") return true;
    showError(`The REST API reads the name * as a wildcard, so this ${what} cannot be changed `
      + "from the console: use an AMQP client.");
    return false;
  }

  async function deleteQueue(name, trigger) {
    if (!addressable(name, "queue")) return;
    if (!ask(`Delete queue ${name} and every message in it?`)) return;
    await act(trigger, async () => {
      await request("DELETE", `queue/${vhostPath()}/${enc(name)}`);
      showStatus(`Queue ${name} deleted.`);
      await loadQueues();
    });
  }

  function ask(question) {
    return window.confirm(visibleControls(question));
  }

  function parseJsonObject(text, what) {
    let value;
    try {
      value = JSON.parse(text);
    } catch (err) {
      throw new Error(`${what}: not valid JSON (${err.message}).`);
    }
    if (value === null || typeof value !== "object" || Array.isArray(value)) {
      throw new Error(`${what}: give a JSON object, such as {"name": "value"}.`);
    }
    return value;
  }

  // -- browsing and moving messages ------------------------------------------------------

  function queuePath(name) {
    return `queue/${vhostPath()}/${enc(name)}`;
  }

  async function openBrowser(name) {
    if (!addressable(name, "queue")) return;
    const other = state.browsing !== name;
    state.browsing = name;
    show($("browser-queue"), name);
    show($("consumers-queue"), name);
    if (other) $("consumers-table").tBodies[0].replaceChildren();
    $("browser").hidden = false;
    $("message-content").hidden = true;
    fillQueueSelects();
    await act(null, async () => { await loadMessages(); await loadConsumers(); });
    $("browser").scrollIntoView({ block: "nearest" });
  }

  function closeBrowser() {
    state.browsing = null;
    $("browser").hidden = true;
    $("messages-table").tBodies[0].replaceChildren();
    $("consumers-table").tBodies[0].replaceChildren();
  }

  // A consumer is a child of its queue (consumer/<node>/<vhost>/<queue>/<name>) and
  // names its connection and session (channel).
  async function loadConsumers() {
    if (!state.browsing) return;
    const consumers = await get(`consumer/${vhostPath()}/${enc(state.browsing)}`);
    consumers.sort((a, b) => (a.createdTime || 0) - (b.createdTime || 0));
    renderRows($("consumers-table").tBodies[0], consumers, (c) => c.name, (c) => signed(
      element("tr", { "data-testid": "consumer-row", "data-consumer": c.name },
        element("td", {}, element("code", { text: c.name })),
        cell(leaseText(c) || c.connection || "–", { field: "connection" }),
        cell(c.session || "–", { numeric: !c.leaseExpires, field: "channel" }),
        cell(c.noAck ? "automatic" : "manual", { field: "ack" }),
        cell(yesNo(c.exclusive), { field: "exclusive" }),
        cell(typeof c.createdTime === "number" ? when(c.createdTime) : "–"))));
    $("consumers-empty").hidden = consumers.length > 0;
  }

  // A lease consumer (a Spark job, docs/spark-consumer.md) has no connection: it shows what
  // it holds and until when its lease runs
  function leaseText(c) {
    if (typeof c.leaseExpires !== "number") return "";
    const held = c.statistics && typeof c.statistics.heldMessages === "number" ? c.statistics.heldMessages : 0;
    return `Spark job (lease): ${count(held)} held, lease until ${when(c.leaseExpires)}`;
  }

  async function loadMessages() {
    if (!state.browsing) return;
    const infos = await get(`${queuePath(state.browsing)}/getMessageInfo?first=0&last=${BROWSE_LIMIT}`);
    const shown = infos.slice(0, BROWSE_LIMIT);
    const tbody = $("messages-table").tBodies[0];
    tbody.replaceChildren(...shown.map((m) => element("tr", { "data-testid": "message-row", "data-message-id": m.id },
      element("td", {}, element("input", { type: "checkbox", className: "message-select", value: m.id,
        "aria-label": `Select message ${m.id}` })),
      cell(String(m.id), { numeric: true, field: "id" }),
      cell(bytes(m.size), { numeric: true }),
      cell(m.contentType || "–"),
      cell(m.routingKey || "–"),
      cell(m.messageId || "–"),
      cell(when(m.arrivalTime)),
      cell(yesNo(m.persistent)),
      cell(count(m.deliveryCount), { numeric: true }),
      element("td", { className: "actions" },
        button("View", (event) => act(event.currentTarget, () => showContent(m.id)),
          { className: "secondary", ariaLabel: `View the body of message ${m.id}`, testid: "view-message" })))));
    $("messages-select-all").checked = false;
    $("messages-empty").hidden = shown.length > 0;
    $("messages-more").hidden = infos.length <= BROWSE_LIMIT;
  }

  async function showContent(id) {
    const response = await get(`${queuePath(state.browsing)}/getMessageContent?messageId=${id}&limit=${CONTENT_LIMIT}`,
      { raw: true });
    const type = response.headers.get("content-type") || "";
    const data = new Uint8Array(await response.arrayBuffer());
    $("content-id").textContent = String(id);
    show($("content-type"), type ? `(${type})` : "");
    show($("content-body"), describeBody(data, type));
    $("message-content").hidden = false;
  }

  function describeBody(data, type) {
    let text;
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(data);
    } catch (_) {
      return hexDump(data);
    }
    if (type.includes("json")) {
      try { return JSON.stringify(JSON.parse(text), null, 2); } catch (_) { /* as it is */ }
    }
    return text;
  }

  function hexDump(data) {
    const lines = [`(binary, ${data.length} bytes)`];
    for (let offset = 0; offset < Math.min(data.length, 4096); offset += 16) {
      const chunk = Array.from(data.slice(offset, offset + 16));
      const hex = chunk.map((b) => b.toString(16).padStart(2, "0")).join(" ");
      const ascii = chunk.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
      lines.push(`${offset.toString(16).padStart(6, "0")}  ${hex.padEnd(47)}  ${ascii}`);
    }
    return lines.join("\n");
  }

  function selectedMessageIds() {
    return Array.from(document.querySelectorAll("#messages-table .message-select:checked"))
      .map((box) => Number(box.value));
  }

  async function moveMessages(event) {
    event.preventDefault();
    await act(event.submitter || $("move-submit"), async () => {
      const ids = selectedMessageIds();
      const destination = $("move-destination").value;
      if (!ids.length) throw new Error("Select the messages to move.");
      if (!destination) throw new Error("Choose the queue to move them to.");
      const moved = await post(`${queuePath(state.browsing)}/moveMessages`, { destination, messageIds: ids });
      const n = Array.isArray(moved) ? moved.length : moved;
      showStatus(`Moved ${n} message${n === 1 ? "" : "s"} from ${state.browsing} to ${destination}.`);
      $("message-content").hidden = true;
      await loadMessages();
      await loadQueues();
    });
  }

  async function deleteMessages(event) {
    const ids = selectedMessageIds();
    if (!ids.length) { showError("Select the messages to delete."); return; }
    if (!ask(`Delete ${ids.length} message${ids.length === 1 ? "" : "s"} from ${state.browsing}?`)) return;
    await act(event.currentTarget, async () => {
      const deleted = await post(`${queuePath(state.browsing)}/deleteMessages`, { messageIds: ids });
      const n = Array.isArray(deleted) ? deleted.length : deleted;
      showStatus(`Deleted ${n} message${n === 1 ? "" : "s"} from ${state.browsing}.`);
      $("message-content").hidden = true;
      await loadMessages();
      await loadQueues();
    });
  }

  async function clearQueue(event) {
    if (!ask(`Remove every ready message from ${state.browsing}?`)) return;
    await act(event.currentTarget, async () => {
      const n = await post(`${queuePath(state.browsing)}/clearQueue`);
      showStatus(`Removed ${n} message${n === 1 ? "" : "s"} from ${state.browsing}.`);
      $("message-content").hidden = true;
      await loadMessages();
      await loadQueues();
    });
  }

  // -- exchanges and bindings ------------------------------------------------------------

  const DEFAULT_EXCHANGE = "<default>";

  function exchangeLabel(name) {
    return name === "" || name === DEFAULT_EXCHANGE ? "(default exchange)" : name;
  }

  function isDefault(name) {
    return name === "" || name === DEFAULT_EXCHANGE;
  }

  async function loadExchanges() {
    if (!state.vhost) return;
    state.exchanges = await get(`exchange/${vhostPath()}`);
    state.exchanges.sort((a, b) => a.name.localeCompare(b.name));
    renderExchanges();
    fillSelect($("bind-exchange"), state.exchanges.filter((x) => !isDefault(x.name)).map((x) => [x.name, x.name]));
    fillSelect($("publish-exchange"), state.exchanges.map((x) => [isDefault(x.name) ? "" : x.name, exchangeLabel(x.name)]));
  }

  function renderExchanges() {
    renderRows($("exchanges-table").tBodies[0], state.exchanges, (x) => x.name, (x) => {
      const bindings = element("ul", { className: "bindings" });
      for (const b of x.bindings || []) {
        bindings.append(element("li", { "data-testid": "binding", "data-destination": b.destination },
          element("span", { text: `→ ${b.destination}` }),
          b.bindingKey ? element("code", { text: b.bindingKey }) : null));
      }
      const row = element("tr", { "data-testid": "exchange-row", "data-exchange": x.name },
        element("td", {}, element("code", { text: exchangeLabel(x.name) })),
        cell(x.type),
        cell(yesNo(x.durable)),
        element("td", {}, bindings));
      signed(row);
      // the unbind buttons come after the signature: their text is not data
      (x.bindings || []).forEach((b, i) => {
        bindings.children[i].append(button("Unbind", (event) => unbind(x.name, b, event.currentTarget),
          { className: "secondary", ariaLabel: `Unbind ${b.destination} from ${x.name} (key ${b.bindingKey || "empty"})` }));
      });
      const builtIn = isDefault(x.name) || x.name.startsWith("amq.");
      row.append(element("td", { className: "actions" }, builtIn ? null
        : button("Delete", (event) => deleteExchange(x.name, event.currentTarget),
          { className: "danger", ariaLabel: `Delete exchange ${x.name}`, testid: "delete-exchange" })));
      return row;
    });
  }

  async function createExchange(event) {
    event.preventDefault();
    await act(event.submitter || $("exchange-create"), async () => {
      const name = $("exchange-name").value.trim();
      if (!name) throw new Error("Give the exchange a name.");
      await post(`exchange/${vhostPath()}`,
        { name, type: $("exchange-type").value, durable: $("exchange-durable").checked });
      $("exchange-name").value = "";
      showStatus(`Exchange ${name} created.`);
      await loadExchanges();
    });
  }

  async function deleteExchange(name, trigger) {
    if (!addressable(name, "exchange")) return;
    if (!ask(`Delete exchange ${name} and its bindings?`)) return;
    await act(trigger, async () => {
      await request("DELETE", `exchange/${vhostPath()}/${enc(name)}`);
      showStatus(`Exchange ${name} deleted.`);
      await loadExchanges();
    });
  }

  async function bind(event) {
    event.preventDefault();
    await act(event.submitter || $("bind-submit"), async () => {
      const exchange = $("bind-exchange").value;
      const queue = $("bind-queue").value;
      const key = $("bind-key").value;
      if (!exchange || !queue) throw new Error("Choose an exchange and a queue.");
      const created = await post(`exchange/${vhostPath()}/${enc(exchange)}/bind`,
        { destination: queue, bindingKey: key });
      showStatus(created ? `Bound ${queue} to ${exchange} with key "${key}".`
        : `${queue} was already bound to ${exchange} with key "${key}".`);
      await loadExchanges();
    });
  }

  async function unbind(exchange, binding, trigger) {
    await act(trigger, async () => {
      await post(`exchange/${vhostPath()}/${enc(exchange)}/unbind`,
        { destination: binding.destination, bindingKey: binding.bindingKey });
      showStatus(`Unbound ${binding.destination} from ${exchange}.`);
      await loadExchanges();
    });
  }

  // -- publishing ----------------------------------------------------------------------

  async function publish(event) {
    event.preventDefault();
    await act(event.submitter || $("publish-submit"), async () => {
      const message = {
        address: $("publish-exchange").value,
        routingKey: $("publish-routing-key").value,
        content: $("publish-body").value,
        persistent: $("publish-persistent").checked,
      };
      const type = $("publish-content-type").value.trim();
      if (type) message.mimeType = type;
      const headers = $("publish-headers").value.trim();
      if (headers) message.headers = parseJsonObject(headers, "Headers");
      const reached = await post(`virtualhost/${vhostPath()}/publishMessage`, { message });
      const through = exchangeLabel(message.address);
      if (reached > 0) {
        showStatus(`Published through ${through}: delivered to ${reached} queue${reached === 1 ? "" : "s"}.`);
      } else {
        showError(`Published through ${through}, but no queue received it (no binding matched `
          + `routing key "${message.routingKey}").`);
      }
    });
  }

  // -- connections ---------------------------------------------------------------------

  // A connection is a child of the port it came in on (connection/<port>/<name>); the
  // virtual host lists the ones that opened it (its getConnections operation).
  function connectionPath(c) {
    return `connection/${enc(c.port)}/${enc(c.name)}`;
  }

  async function loadConnections() {
    if (!state.vhost) return;
    const connections = await get(`virtualhost/${vhostPath()}/getConnections`);
    connections.sort((a, b) => (a.createdTime || 0) - (b.createdTime || 0));
    renderRows($("connections-table").tBodies[0], connections, (c) => JSON.stringify([c.port, c.name]), (c) => {
      const client = [c.clientId, [c.clientProduct, c.clientVersion].filter(Boolean).join(" ")]
        .filter(Boolean).join(" · ");
      const row = element("tr", { "data-testid": "connection-row", "data-connection": c.name,
        "data-client-id": c.clientId || "" },
      element("td", {}, element("code", { text: c.name })),
      cell(client || "–"),
      cell(c.principal || "–"),
      cell(c.protocol || "–"),
      cell(c.port || "–"),
      cell(c.remoteAddress || "–"),
      cell(count(stat(c, "sessionCount")), { numeric: true }),
      cell(typeof c.createdTime === "number" ? when(c.createdTime) : "–"));
      signed(row);
      row.append(element("td", { className: "actions" },
        button("Close", (event) => closeConnection(c, event.currentTarget),
          { className: "danger", ariaLabel: `Close connection ${c.name}`, testid: "close-connection" })));
      return row;
    });
    $("connections-empty").hidden = connections.length > 0;
  }

  async function closeConnection(connection, trigger) {
    if (!addressable(connection.name, "connection")) return;
    const who = connection.clientId ? `${connection.name} (${connection.clientId})` : connection.name;
    if (!ask(`Close connection ${who}? The client is told 320 CONNECTION_FORCED.`)) return;
    await act(trigger, async () => {
      await request("DELETE", connectionPath(connection));
      showStatus(`Connection ${connection.name} closed.`);
      await loadConnections();
    });
  }

  // -- tabs and refreshing -----------------------------------------------------------------

  // what runs at every refresh, whichever tab is shown, with the broker's representation
  const SUMMARY_OBSERVERS = [];

  const TAB_LOADERS = {
    overview: [loadVirtualHosts],
    queues: [loadQueues],
    exchanges: [loadExchanges, loadQueues],
    publish: [loadExchanges],
    connections: [loadConnections],
  };

  function selectTab(tab) {
    state.tab = tab;
    for (const b of document.querySelectorAll('[role="tab"]')) {
      const selected = b.dataset.tab === tab;
      b.setAttribute("aria-selected", String(selected));
      b.tabIndex = selected ? 0 : -1;
      $(b.getAttribute("aria-controls")).hidden = !selected;
    }
    refresh();
  }

  async function refresh() {
    if (!state.loggedIn) return;
    if (state.refreshing) {
      state.refreshAgain = true;     // e.g. another tab chosen: load it once this one is done
      return;
    }
    state.refreshing = true;
    state.refreshAgain = false;
    try {
      await loadBrokerSummary();
      for (const load of TAB_LOADERS[state.tab] || []) await load();
      $("last-refresh").textContent = `Updated ${new Date().toLocaleTimeString()}`;
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 401)) {
        $("last-refresh").textContent = `Refresh failed: ${err.message}`;
      }
    } finally {
      state.refreshing = false;
    }
    if (state.refreshAgain) refresh();
  }

  function startTimer() {
    stopTimer();
    if (!$("auto-refresh").checked) return;
    state.timer = window.setInterval(() => {
      if (!document.hidden) refresh();
    }, REFRESH_MS);
  }

  function stopTimer() {
    if (state.timer !== null) window.clearInterval(state.timer);
    state.timer = null;
  }

  // -- wiring --------------------------------------------------------------------------

  function tabKeys(event) {
    const tabs = Array.from(document.querySelectorAll('[role="tab"]'));
    const i = tabs.indexOf(event.target);
    if (i < 0) return;
    let next = null;
    if (event.key === "ArrowRight") next = tabs[(i + 1) % tabs.length];
    else if (event.key === "ArrowLeft") next = tabs[(i - 1 + tabs.length) % tabs.length];
    else if (event.key === "Home") next = tabs[0];
    else if (event.key === "End") next = tabs[tabs.length - 1];
    if (next) {
      event.preventDefault();
      next.focus();
      selectTab(next.dataset.tab);
    }
  }

  async function start() {
    $("login-form").addEventListener("submit", login);
    $("logout").addEventListener("click", logout);
    $("vhost-select").addEventListener("change", (event) => {
      const [node, name] = JSON.parse(event.target.value);
      chooseVirtualHost(node, name);
    });
    $("auto-refresh").addEventListener("change", startTimer);
    for (const b of document.querySelectorAll('[role="tab"]')) {
      b.addEventListener("click", () => selectTab(b.dataset.tab));
    }
    document.querySelector(".tabs").addEventListener("keydown", tabKeys);
    $("queue-form").addEventListener("submit", createQueue);
    $("queue-filter").addEventListener("input", renderQueues);
    $("browser-refresh").addEventListener("click", (event) => act(event.currentTarget, async () => {
      await loadMessages();
      await loadConsumers();
    }));
    $("browser-close").addEventListener("click", closeBrowser);
    $("messages-select-all").addEventListener("change", (event) => {
      for (const box of document.querySelectorAll("#messages-table .message-select")) {
        box.checked = event.target.checked;
      }
    });
    $("move-form").addEventListener("submit", moveMessages);
    $("delete-messages").addEventListener("click", deleteMessages);
    $("clear-queue").addEventListener("click", clearQueue);
    $("exchange-form").addEventListener("submit", createExchange);
    $("bind-form").addEventListener("submit", bind);
    $("publish-form").addEventListener("submit", publish);

    // Already logged in (a session cookie, or a broker that lets anonymous users in)?
    try {
      const session = await get("/service/session", { quietAuth: true });
      state.user = session.user;
      state.csrf = session.csrfToken;
      await showConsole();
    } catch (err) {
      showLogin(err instanceof ApiError && err.status === 401 ? "" : err.message);
    }
  }

  // for console-pages.js: the helpers its pages are built with, and where to plug them in
  window.DeltaMQConsole = {
    state, $, get, post, request, act, ask, showStatus, showError, element, cell, button,
    renderRows, signed, fillSelect, count, perSecond, bytes, duration, when, yesNo, stat,
    visibleControls, show, enc, loadVirtualHosts,
    addTab(name, loaders) { TAB_LOADERS[name] = loaders; },
    onSummary(observe) { SUMMARY_OBSERVERS.push(observe); },
  };

  document.addEventListener("DOMContentLoaded", start);
})();
