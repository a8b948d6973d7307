// DeltaMQ web console, the operator's pages: message-rate and depth charts on the
// overview, node health, users, virtual hosts and ports.  Built with the helpers
// console.js shares through window.DeltaMQConsole; loaded after it (both deferred).
//
// The charts are plain SVG drawn here: one point per refresh (every 3 s while the page
// is visible), the last CHART_POINTS points, from the broker's statistics.  Node health
// reads the process' figures (memory, descriptors, CPU) and the journals' from
// /metrics, the Prometheus text the same session may read, and the alarms from the
// broker's statistics.
"use strict";

(() => {
  const C = window.DeltaMQConsole;
  const { $, get, post, request, act, ask, showStatus, element, cell, button, renderRows,
    signed, fillSelect, count, bytes, duration, stat, enc } = C;

  const CHART_POINTS = 100;
  const WIDTH = 600;
  const HEIGHT = 180;

  // -- charts ------------------------------------------------------------------------

  const history = { rates: [], depth: [] };     // [[published, delivered]], [[ready]]

  function remember(series, point) {
    series.push(point);
    if (series.length > CHART_POINTS) series.shift();
  }

  async function sample(broker) {
    const s = broker.statistics || {};
    remember(history.rates, [s.messagesInRate || 0, s.messagesOutRate || 0]);
    const hosts = await get("virtualhost");
    remember(history.depth, [hosts.reduce((sum, h) => sum + (stat(h, "totalDepthOfQueuesMessages") || 0), 0)]);
    draw($("rate-chart"), history.rates, $("rate-chart-scale"), (v) => `${v.toFixed(1)} msg/s`);
    draw($("depth-chart"), history.depth, $("depth-chart-scale"), (v) => `${count(v)} messages`);
  }

  // the charts' <svg> elements are in the page: their namespace is SVG's
  function svg(tag, attributes) {
    const el = document.createElementNS($("rate-chart").namespaceURI, tag);
    for (const [key, value] of Object.entries(attributes)) el.setAttribute(key, value);
    return el;
  }

  // One polyline per series, scaled to the highest value shown, newest point on the right.
  function draw(chart, points, scale, label) {
    const top = Math.max(1e-9, ...points.flat());
    const step = WIDTH / (CHART_POINTS - 1);
    const offset = CHART_POINTS - points.length;
    const y = (v) => (HEIGHT - 5 - (v / top) * (HEIGHT - 15)).toFixed(1);
    const children = [0.25, 0.5, 0.75].map((f) => svg("line", {
      class: "grid", x1: 0, x2: WIDTH, y1: HEIGHT * f, y2: HEIGHT * f }));
    const lines = points.length ? points[0].length : 0;
    for (let series = 0; series < lines; series += 1) {
      const coordinates = points.map((p, i) => `${((offset + i) * step).toFixed(1)},${y(p[series])}`);
      children.push(svg("polyline", { class: `series-${series}`, points: coordinates.join(" ") }));
    }
    chart.replaceChildren(...children);
    chart.dataset.points = String(points.length);
    chart.dataset.last = points.length ? points[points.length - 1].join(",") : "";
    C.show(scale, points.length ? `top of the scale: ${label(top)}; last ${points.length} refreshes` : "");
  }

  // -- node health ---------------------------------------------------------------------

  // Prometheus text -> {name: [{labels, value}]}
  function parseMetrics(text) {
    const found = {};
    for (const line of text.split("\n")) {
      if (!line || line.startsWith("#")) continue;
      const match = /^([A-Za-z_:][\w:]*)(\{(.*)\})? (\S+)/.exec(line);
      if (!match) continue;
      const labels = {};
      for (const pair of (match[3] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1]] = pair[2];
      (found[match[1]] ||= []).push({ labels, value: Number(match[4]) });
    }
    return found;
  }

  function one(metrics, name, labels = {}) {
    const sample = (metrics[name] || []).find((s) => Object.entries(labels).every(([k, v]) => s.labels[k] === v));
    return sample ? sample.value : undefined;
  }

  // The broker's alarms in force: attributes and statistics named ...Alarm that are true.
  function alarmsOf(broker) {
    const shown = { ...broker, ...(broker.statistics || {}) };
    return Object.keys(shown).filter((k) => /alarm$/i.test(k) && shown[k] === true).sort();
  }

  // Disk free space, when the broker reports it (a statistic or a metric naming it).
  function diskFree(broker, metrics) {
    const s = broker.statistics || {};
    const key = Object.keys(s).find((k) => /disk.*(free|available)|(free|available).*disk/i.test(k));
    if (key !== undefined) return s[key];
    const name = Object.keys(metrics).find((n) => /^deltamq_.*disk.*(free|available).*bytes$/.test(n));
    return name ? one(metrics, name) : undefined;
  }

  async function loadHealth() {
    const broker = await get("broker");
    const response = await request("GET", "/metrics", undefined, { raw: true });
    const metrics = parseMetrics(await response.text());
    const s = broker.statistics || {};
    const resident = one(metrics, "process_resident_memory_bytes");
    const watermark = broker.memoryHighWatermark;
    const alarms = alarmsOf(broker);
    const disk = diskFree(broker, metrics);
    const figures = [
      ["Version", `DeltaMQ ${broker.productVersion || "?"}`, "version"],
      ["Uptime", duration(s.uptime / 1000), "uptime"],
      ["Process id", String(s.processPid), "pid"],
      ["Memory (resident)", typeof resident === "number"
        ? `${bytes(resident)}${watermark ? ` (high watermark ${bytes(watermark)}, ${(100 * resident / watermark).toFixed(0)} %)` : ""}`
        : "–", "memory"],
      ["Disk free", typeof disk === "number" ? bytes(disk) : "not reported", "disk"],
      ["File descriptors", `${count(one(metrics, "process_open_fds"))} open of ${count(one(metrics, "process_max_fds"))}`, "descriptors"],
      ["CPU time", `${(one(metrics, "process_cpu_seconds_total") || 0).toFixed(1)} s`, "cpu"],
      ["Connections / channels / consumers", `${count(one(metrics, "deltamq_connections"))} / `
        + `${count(one(metrics, "deltamq_channels"))} / ${count(one(metrics, "deltamq_consumers"))}`, "clients"],
      ["Alarms", alarms.length ? alarms.join(", ") : "none", "alarms"],
    ];
    $("node-health").replaceChildren(...figures.flatMap(([term, value, field]) => [
      element("dt", { text: term }),
      element("dd", { text: value, "data-field": field,
        className: field === "alarms" && alarms.length ? "alarm" : undefined })]));
    const hosts = [...new Set((metrics.deltamq_journal_commits_total || []).map((m) => m.labels.vhost))].sort();
    renderRows($("journals-table").tBodies[0], hosts, (h) => h, (vhost) => {
      const at = { vhost };
      const commits = one(metrics, "deltamq_journal_commit_seconds_count", at) || 0;
      const rows = one(metrics, "deltamq_journal_commit_rows_count", at) || 0;
      const age = one(metrics, "deltamq_journal_checkpoint_age_seconds", at);
      return signed(element("tr", { "data-testid": "journal-row", "data-vhost": vhost },
        cell(vhost),
        cell(count(one(metrics, "deltamq_journal_commits_total", at)), { numeric: true, field: "commits" }),
        cell(commits ? `${(1000 * one(metrics, "deltamq_journal_commit_seconds_sum", at) / commits).toFixed(1)} ms` : "–",
          { numeric: true, field: "latency" }),
        cell(rows ? (one(metrics, "deltamq_journal_commit_rows_sum", at) / rows).toFixed(1) : "–",
          { numeric: true, field: "group" }),
        cell(count(one(metrics, "deltamq_journal_pending_rows", at)), { numeric: true, field: "pending" }),
        cell(`${(one(metrics, "deltamq_journal_commit_in_flight_seconds", at) || 0).toFixed(2)} s`,
          { numeric: true, field: "lag" }),
        cell(count(one(metrics, "deltamq_journal_failed_commits_total", at)), { numeric: true, field: "failed" }),
        cell(typeof age === "number" ? `${duration(age)} ago` : "none yet", { numeric: true, field: "checkpoint" })));
    });
    $("journals-empty").hidden = hosts.length > 0;
  }

  // -- users -----------------------------------------------------------------------------

  async function loadUsers() {
    const providers = await get("authenticationprovider?depth=1");
    const withUsers = providers.filter((p) => p.type === "PasswordFile" || (p.users || []).length);
    fillSelect($("user-provider"), withUsers.map((p) => [p.name, p.name]));
    const users = withUsers.flatMap((p) => (p.users || []).map((u) => ({ provider: p.name, user: u })));
    users.sort((a, b) => a.user.name.localeCompare(b.user.name));
    renderRows($("users-table").tBodies[0], users, (u) => JSON.stringify([u.provider, u.user.name]), (u) => {
      const hosts = u.user.virtualHosts || [];
      const row = signed(element("tr", { "data-testid": "user-row", "data-user": u.user.name },
        element("td", {}, element("code", { text: u.user.name })),
        cell(u.provider),
        cell(hosts.length ? hosts.join(", ") : "all", { field: "vhosts" })));
      row.append(element("td", { className: "actions" },
        button("Delete", (event) => deleteUser(u.provider, u.user.name, event.currentTarget),
          { className: "danger", ariaLabel: `Delete user ${u.user.name}`, testid: "delete-user" })));
      return row;
    });
  }

  async function createUser(event) {
    event.preventDefault();
    await act(event.submitter || $("user-create"), async () => {
      const provider = $("user-provider").value;
      const name = $("user-name-input").value.trim();
      if (!provider) throw new Error("No authentication provider keeps users.");
      if (!name) throw new Error("Give the user a name.");
      const hosts = $("user-vhosts").value.split(",").map((h) => h.trim()).filter(Boolean);
      await post(`user/${enc(provider)}`, { name, password: $("user-password").value, virtualHosts: hosts });
      $("user-name-input").value = "";
      $("user-password").value = "";
      $("user-vhosts").value = "";
      showStatus(`User ${name} added.`);
      await loadUsers();
    });
  }

  async function deleteUser(provider, name, trigger) {
    if (!ask(`Delete user ${name}? They can no longer log in.`)) return;
    await act(trigger, async () => {
      await request("DELETE", `user/${enc(provider)}/${enc(name)}`);
      showStatus(`User ${name} deleted.`);
      await loadUsers();
    });
  }

  // -- virtual hosts (their nodes) --------------------------------------------------------

  async function loadNodes() {
    const nodes = await get("virtualhostnode?depth=1");
    nodes.sort((a, b) => a.name.localeCompare(b.name));
    renderRows($("nodes-table").tBodies[0], nodes, (n) => n.name, (node) => {
      const vhost = (node.virtualhosts || [])[0] || {};
      const row = signed(element("tr", { "data-testid": "node-row", "data-node": node.name },
        element("td", {}, element("code", { text: vhost.name || "–" })),
        cell(node.name), cell(node.type), cell(vhost.state || node.state, { field: "state" }),
        cell(count(stat(vhost, "connectionCount")), { numeric: true }),
        cell(vhost.maxConnections === -1 ? "no limit" : count(vhost.maxConnections), { numeric: true }),
        cell(count(stat(vhost, "queueCount")), { numeric: true }),
        cell(count(stat(vhost, "totalDepthOfQueuesMessages")), { numeric: true }),
        cell(node.storePath || "–")));
      row.append(element("td", { className: "actions" },
        button("Delete", (event) => deleteNode(node.name, event.currentTarget),
          { className: "danger", ariaLabel: `Delete virtual host node ${node.name}`, testid: "delete-node" })));
      return row;
    });
  }

  async function createNode(event) {
    event.preventDefault();
    await act(event.submitter || $("node-create"), async () => {
      const name = $("node-name").value.trim();
      if (!name) throw new Error("Give the virtual host a name.");
      await post("virtualhostnode", { name, type: $("node-type").value });
      $("node-name").value = "";
      showStatus(`Virtual host ${name} added.`);
      await loadNodes();
      await C.loadVirtualHosts();
    });
  }

  async function deleteNode(name, trigger) {
    if (!ask(`Delete virtual host node ${name}, its virtual host and every message in it?`)) return;
    await act(trigger, async () => {
      await request("DELETE", `virtualhostnode/${enc(name)}`);
      showStatus(`Virtual host node ${name} deleted.`);
      await loadNodes();
      await C.loadVirtualHosts();
    });
  }

  // -- ports -----------------------------------------------------------------------------

  async function loadPorts() {
    const ports = await get("port");
    ports.sort((a, b) => a.name.localeCompare(b.name));
    renderRows($("ports-table").tBodies[0], ports, (p) => p.name, (port) => signed(
      element("tr", { "data-testid": "port-row", "data-port": port.name },
        element("td", {}, element("code", { text: port.name })),
        cell(port.type), cell(String(port.port), { numeric: true }),
        cell(port.boundPort >= 0 ? `${port.bindingAddress || "*"}:${port.boundPort}` : "not listening",
          { field: "listening" }),
        cell((port.protocols || []).join(", ")),
        cell(port.authenticationProvider || "–"),
        cell(count(stat(port, "connectionCount")), { numeric: true }),
        cell(port.pendingRestart || "–"))));
  }

  // -- wiring ----------------------------------------------------------------------------

  C.onSummary(sample);
  C.addTab("node", [loadHealth]);
  C.addTab("users", [loadUsers]);
  C.addTab("vhosts", [loadNodes]);
  C.addTab("ports", [loadPorts]);
  document.addEventListener("DOMContentLoaded", () => {
    $("user-form").addEventListener("submit", createUser);
    $("node-form").addEventListener("submit", createNode);
  });
})();
