// The a2a-continue console. Plain JavaScript, no framework, no build step.
//
// Rules the page keeps:
// - the token lives in this tab's sessionStorage only and goes out as an Authorization
//   header; never in a URL, a cookie or localStorage;
// - everything shown comes from the REST API with that token;
// - text from agents (and every other value) is put in the page with textContent, never
//   parsed as HTML;
// - the view and its filters are in the query string, so a view can be shared and reloaded.
"use strict";

const TOKEN_KEY = "a2a-continue.token";
const INTERRUPTED = new Set(["input-required", "auth-required"]);
const TERMINAL = new Set(["completed", "canceled", "failed", "rejected"]);
const FILTERS = ["state", "agentId", "contextId", "owner"];

const $ = (id) => document.getElementById(id);

// ---- elements, always built from text ----

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function clear(node) {
  node.replaceChildren();
  return node;
}

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "—";
}

function stateBadge(state) {
  return el("span", { class: "state", dataset: { state } }, state);
}

function consoleLink(query) {
  return "console?" + new URLSearchParams(query).toString();
}

// ---- errors ----

class ApiError extends Error {
  constructor(problem, status) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.title = problem.title || `HTTP ${status}`;
    this.detail = problem.detail || "";
    this.status = status;
  }
}

async function problemOf(response) {
  let problem = {};
  try {
    problem = await response.json();
  } catch {
    problem = { title: response.statusText || `HTTP ${response.status}` };
  }
  return new ApiError(problem || {}, response.status);
}

function describe(error) {
  if (error instanceof ApiError) return [error.title, error.detail];
  return ["The gateway could not be reached", String(error && error.message ? error.message : error)];
}

function showError(error) {
  const [title, detail] = describe(error);
  $("error-title").textContent = title;
  $("error-detail").textContent = detail;
  $("error").hidden = false;
}

function hideError() {
  $("error").hidden = true;
}

// ---- the token and the API ----

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

function claims() {
  try {
    const part = (token() || "").split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    return JSON.parse(atob(part + "=".repeat((4 - (part.length % 4)) % 4)));
  } catch {
    return {};
  }
}

function authHeaders(extra) {
  return { Authorization: `Bearer ${token()}`, ...(extra || {}) };
}

async function api(path, options) {
  const opts = options || {};
  const headers = authHeaders(opts.headers);
  let body;
  if (opts.json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(opts.json);
  }
  const response = await fetch(path, {
    method: opts.method || "GET",
    headers,
    body,
    cache: "no-store",
    credentials: "omit",
  });
  if (!response.ok) {
    const error = await problemOf(response);
    if (response.status === 401) signOut(error);
    throw error;
  }
  return response.status === 204 ? null : response.json();
}

async function allAgents() {
  const agents = [];
  let cursor = null;
  for (let page = 0; page < 10; page++) {
    const query = new URLSearchParams({ limit: "200" });
    if (cursor) query.set("cursor", cursor);
    const answer = await api(`v1/a2a/agents?${query}`);
    agents.push(...answer.agents);
    cursor = answer.nextCursor;
    if (!cursor) break;
  }
  return agents;
}

// ---- server-sent events read with fetch (EventSource cannot send Authorization) ----

async function readEvents(body, onEvent) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let raw = "";
  let text = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    raw += value;
    // A chunk may end between the \r and the \n of one line end: keep that \r for later.
    const cut = raw.endsWith("\r") ? raw.length - 1 : raw.length;
    text += raw.slice(0, cut).replace(/\r\n|\r/g, "\n");
    raw = raw.slice(cut);
    let end;
    while ((end = text.indexOf("\n\n")) >= 0) {
      const block = text.slice(0, end);
      text = text.slice(end + 2);
      const frame = { id: null, event: "message", data: [] };
      for (const line of block.split("\n")) {
        if (!line || line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "data") frame.data.push(value);
        else if (field === "event") frame.event = value;
        else if (field === "id") frame.id = value;
      }
      if (frame.data.length) onEvent({ ...frame, data: frame.data.join("\n") });
    }
  }
}

// ---- sign-in ----

function signOut(error) {
  sessionStorage.removeItem(TOKEN_KEY);
  showSignIn();
  if (error) showError(error);
}

function showSignIn() {
  for (const id of ["agents-view", "tasks-view", "task-view"]) $(id).hidden = true;
  $("nav").hidden = true;
  $("sign-in-view").hidden = false;
  $("token").focus();
}

async function exchangeCode(code) {
  const response = await fetch("console/sign-in", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ code }),
    cache: "no-store",
    credentials: "omit",
  });
  if (!response.ok) throw await problemOf(response);
  const signed = await response.json();
  sessionStorage.setItem(TOKEN_KEY, signed.token);
}

async function signInWithToken(event) {
  event.preventDefault();
  hideError();
  const given = $("token").value.trim().replace(/^Bearer\s+/i, "");
  sessionStorage.setItem(TOKEN_KEY, given);
  try {
    await api("v1/a2a/agents?limit=1");
  } catch (error) {
    sessionStorage.removeItem(TOKEN_KEY);
    showError(error);
    return;
  }
  $("token").value = "";
  route();
}

// ---- views ----

function showView(id) {
  for (const view of ["sign-in-view", "agents-view", "tasks-view", "task-view"]) {
    $(view).hidden = view !== id;
  }
  $("nav").hidden = false;
  const who = claims();
  $("who").textContent = who.sub ? `${who.sub}${who.is_admin ? " (admin)" : ""}` : "";
  const current = id === "agents-view" ? "agents" : "tasks";
  for (const link of document.querySelectorAll("#nav a[data-view]")) {
    if (link.dataset.view === current) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function route() {
  const params = new URLSearchParams(location.search);
  const view = params.get("view") || "tasks";
  const shown =
    view === "agents" ? showAgents() : view === "task" ? showTask(params) : showTasks(params);
  shown.catch(showError);
}

// Agents: what each is, and how many of its latest tasks are in each state.
async function showAgents() {
  showView("agents-view");
  const list = clear($("agents"));
  const agents = await allAgents();
  $("agents-empty").hidden = agents.length > 0;
  for (const agent of agents) {
    const counts = el("div", { class: "meta counts" }, "counting tasks…");
    const caps = agent.capabilities || {};
    list.append(
      el(
        "li",
        { dataset: { agentId: agent.id } },
        el("div", { class: "title" }, agent.name),
        el(
          "div",
          { class: "meta" },
          el("span", {}, `A2A ${agent.protocolVersion}`),
          el("span", {}, caps.streaming ? "streams" : "does not stream"),
          el("span", {}, agent.visibility + (agent.teamId ? ` (${agent.teamId})` : "")),
          el("span", {}, `owner ${agent.owner}`),
          el("a", { href: consoleLink({ view: "tasks", agentId: agent.id }) }, "tasks"),
        ),
        counts,
      ),
    );
    countTasks(agent.id, counts);
  }
}

async function countTasks(agentId, into) {
  try {
    const page = await api(`v1/a2a/tasks?${new URLSearchParams({ agentId, limit: "200" })}`);
    const byState = new Map();
    for (const task of page.tasks) byState.set(task.state, (byState.get(task.state) || 0) + 1);
    clear(into);
    if (!byState.size) into.append("no task yet");
    for (const [state, n] of byState) into.append(el("span", {}, stateBadge(state), ` ${n}`));
    if (page.nextCursor) into.append(el("span", {}, "(of the latest 200)"));
  } catch (error) {
    into.textContent = describe(error).join(": ");
  }
}

async function registerAgent(event) {
  event.preventDefault();
  hideError();
  const body = { cardUrl: $("card-url").value.trim(), visibility: $("visibility").value };
  const team = $("team-id").value.trim();
  if (team) body.teamId = team;
  try {
    await api("v1/a2a/agents", { method: "POST", json: body });
    $("register-form").reset();
    await showAgents();
  } catch (error) {
    showError(error);
  }
}

// Tasks of every visible agent, filtered by the query string.
async function showTasks(params) {
  showView("tasks-view");
  $("f-owner-box").hidden = !claims().is_admin && !params.get("owner");
  for (const name of FILTERS) {
    const field = $("filters").elements[name];
    if (name !== "agentId") field.value = params.get(name) || "";
  }
  const agents = await allAgents();
  const names = new Map(agents.map((a) => [a.id, a.name]));
  const select = $("f-agent");
  select.replaceChildren(el("option", { value: "" }, "any"));
  for (const agent of agents) select.append(el("option", { value: agent.id }, agent.name));
  select.value = params.get("agentId") || "";

  const query = new URLSearchParams({ limit: "50" });
  for (const name of [...FILTERS, "cursor"]) if (params.get(name)) query.set(name, params.get(name));
  const page = await api(`v1/a2a/tasks?${query}`);
  const list = clear($("tasks"));
  $("tasks-empty").hidden = page.tasks.length > 0;
  for (const task of page.tasks) {
    const link = consoleLink({ view: "task", agentId: task.agentId, taskId: task.id });
    list.append(
      el(
        "li",
        { dataset: { taskId: task.id, agentId: task.agentId } },
        el("div", { class: "title" }, el("a", { href: link, class: "mono" }, task.id), " ", stateBadge(task.state)),
        el(
          "div",
          { class: "meta" },
          el("span", { class: "agent" }, names.get(task.agentId) || task.agentId),
          el("span", {}, `owner ${task.owner}`),
          task.contextId ? el("span", { class: "mono" }, `context ${task.contextId}`) : null,
          el("span", {}, `updated ${when(task.updatedAt)}`),
        ),
      ),
    );
  }
  const more = $("tasks-more");
  more.hidden = !page.nextCursor;
  if (page.nextCursor) {
    const next = new URLSearchParams(params);
    next.set("cursor", page.nextCursor);
    more.href = "console?" + next.toString();
  }
}

function applyFilters(event) {
  event.preventDefault();
  const query = new URLSearchParams({ view: "tasks" });
  for (const name of FILTERS) {
    const value = $("filters").elements[name].value.trim();
    if (value) query.set(name, value);
  }
  location.search = query.toString();
}

// ---- one task ----

const current = { base: null, agent: null, task: null, lastSeq: 0, finished: false, refreshing: null };

function partNodes(part) {
  if (typeof part.text === "string") return el("p", { class: "part-text" }, part.text);
  if (part.data !== undefined) return el("pre", { class: "part-data" }, JSON.stringify(part.data, null, 2));
  const file = part.file || part;
  const name = file.name || file.filename || "file";
  const where = file.uri || file.url || (file.bytes || file.raw ? "(inline bytes)" : "");
  return el("p", { class: "part-file" }, `${name} ${file.mimeType || file.mediaType || ""} ${where}`);
}

function partsOf(holder) {
  return Array.isArray(holder && holder.parts) ? holder.parts : [];
}

function renderTask(task) {
  current.task = task;
  $("t-id").textContent = task.id;
  $("t-state").replaceWith(Object.assign(stateBadge(task.state), { id: "t-state" }));
  $("t-agent").textContent = current.agent ? current.agent.name : task.agentId;
  $("t-owner").textContent = task.owner;
  showLimits(task.owner);
  $("t-team").textContent = task.teamId || "—";
  const context = clear($("t-context"));
  context.append(
    task.contextId
      ? el("a", { href: consoleLink({ view: "tasks", contextId: task.contextId }) }, task.contextId)
      : "—",
  );
  $("t-updated").textContent = when(task.updatedAt);
  const message = clear($("t-message"));
  const parts = partsOf(task.statusMessage);
  if (!parts.length) message.append(el("p", { class: "muted" }, "none"));
  for (const part of parts) message.append(partNodes(part));
  const artifacts = clear($("t-artifacts"));
  if (!task.artifacts.length) artifacts.append(el("p", { class: "muted" }, "none"));
  for (const artifact of task.artifacts) {
    artifacts.append(
      el("div", { class: "artifact" }, el("div", { class: "title" }, artifact.name || artifact.artifactId || "artifact"), partsOf(artifact).map(partNodes)),
    );
  }
  $("reply-form").hidden = !INTERRUPTED.has(task.state);
  $("cancel").hidden = TERMINAL.has(task.state);
}

// The limits of a task's owner, for admins (GET /v1/a2a/limits/caller/{sub}; 404: none set).
async function showLimits(sub) {
  const admin = Boolean(claims().is_admin);
  $("t-limits-label").hidden = $("t-limits").hidden = !admin;
  if (!admin) return;
  const none = (v) => (v === null || v === undefined ? "no limit" : v);
  try {
    const found = await api(`/v1/a2a/limits/caller/${encodeURIComponent(sub)}`);
    const e = found.effective;
    $("t-limits").textContent = `${none(e.rps)} req/s, burst ${none(e.burst)}, ${none(e.inflight)} in flight (override)`;
  } catch (error) {
    $("t-limits").textContent = error.status === 404 ? "the defaults (no override)" : describe(error)[0];
  }
}

async function refreshTask() {
  // One read at a time; a change seen meanwhile reads once more after it.
  if (current.refreshing) {
    current.again = true;
    return current.refreshing;
  }
  current.refreshing = (async () => {
    do {
      current.again = false;
      renderTask(await api(current.base));
    } while (current.again);
  })().finally(() => {
    current.refreshing = null;
  });
  return current.refreshing;
}

function addEvent(event) {
  if (event.seq <= current.lastSeq) return; // a replay after a reconnect: already shown
  current.lastSeq = event.seq;
  const change =
    event.previousState || event.newState
      ? `${event.previousState || "—"} → ${event.newState || "—"}`
      : "";
  const data = event.data && Object.keys(event.data).length ? JSON.stringify(event.data, null, 2) : null;
  $("timeline").append(
    el(
      "li",
      { dataset: { seq: event.seq, type: event.type } },
      el("span", { class: "change" }, `#${event.seq} ${event.type}`),
      " ",
      el("span", {}, change),
      el("div", { class: "meta muted" }, `${event.actor} · ${when(event.createdAt)}`),
      data ? el("pre", {}, data) : null,
    ),
  );
  if (event.newState && TERMINAL.has(event.newState)) current.finished = true;
}

function setLive(text) {
  $("live").textContent = text;
}

// The live timeline: the event stream from the last seq shown, resumed after a drop.
async function followEvents(base) {
  let delay = 500;
  while (current.base === base) {
    const headers = authHeaders({ Accept: "text/event-stream" });
    if (current.lastSeq) headers["Last-Event-ID"] = String(current.lastSeq);
    try {
      const response = await fetch(`${base}/events?after=${current.lastSeq}`, {
        headers,
        cache: "no-store",
        credentials: "omit",
      });
      if (!response.ok) {
        const error = await problemOf(response);
        if (response.status < 500) {
          setLive("");
          if (response.status === 401) signOut(error);
          else showError(error);
          return;
        }
        throw error;
      }
      setLive("(live)");
      delay = 500;
      await readEvents(response.body, (frame) => {
        addEvent(JSON.parse(frame.data));
        refreshTask().catch(showError);
      });
      if (current.finished) {
        setLive("(finished)");
        return;
      }
    } catch {
      // the stream dropped: resume after the last seq shown
    }
    setLive("(reconnecting…)");
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 10000);
  }
}

async function showTask(params) {
  showView("task-view");
  const agentId = params.get("agentId") || "";
  const taskId = params.get("taskId") || "";
  current.base = `v1/a2a/${encodeURIComponent(agentId)}/tasks/${encodeURIComponent(taskId)}`;
  current.lastSeq = 0;
  current.finished = false;
  clear($("timeline"));
  const [agent, task] = await Promise.all([api(`v1/a2a/agents/${encodeURIComponent(agentId)}`), api(current.base)]);
  current.agent = agent;
  renderTask(task);
  followEvents(current.base);
  showPushConfigs(current.base);
}

async function sendReply(event) {
  event.preventDefault();
  hideError();
  const button = event.submitter || $("reply-form").querySelector("button");
  button.disabled = true;
  const streamed = Boolean(current.agent && current.agent.capabilities && current.agent.capabilities.streaming);
  const headers = authHeaders({ "Content-Type": "application/json" });
  if (streamed) headers.Accept = "text/event-stream";
  try {
    const response = await fetch(`${current.base}/messages`, {
      method: "POST",
      headers,
      body: JSON.stringify({ text: $("reply").value }),
      cache: "no-store",
      credentials: "omit",
    });
    if (!response.ok) throw await problemOf(response);
    let refusal = null;
    if (streamed) {
      await readEvents(response.body, (frame) => {
        if (frame.event === "error") refusal = JSON.parse(frame.data);
      });
    } else {
      const answer = await response.json();
      if (answer.error) refusal = answer;
    }
    if (refusal) showError(agentRefusal(refusal));
    $("reply").value = "";
    await refreshTask();
  } catch (error) {
    showError(error);
  } finally {
    button.disabled = false;
  }
}

function agentRefusal(frame) {
  if (frame.error) {
    const detail = `${frame.error.code}: ${frame.error.message || ""}`;
    return new ApiError({ title: "The agent answered with an error", detail }, 200);
  }
  return new ApiError(frame, frame.status || 502);
}

async function cancelTask() {
  hideError();
  const button = $("cancel");
  // A cancel cannot be undone: the first click asks, the second one cancels.
  if (button.dataset.armed !== "yes") {
    button.dataset.armed = "yes";
    button.textContent = "Cancel it: click again";
    return;
  }
  delete button.dataset.armed;
  button.textContent = "Cancel task";
  $("cancel").disabled = true;
  try {
    renderTask(await api(`${current.base}/cancel`, { method: "POST", json: {} }));
  } catch (error) {
    showError(error);
  } finally {
    $("cancel").disabled = false;
  }
}

// ---- push configs and their deliveries (SPEC §12, docs/push.md) ----

async function showPushConfigs(base) {
  const box = clear($("push"));
  let answer;
  try {
    answer = await api(`${base}/push-configs`);
  } catch (error) {
    box.append(el("p", { class: "error push-error" }, describe(error).join(": ")));
    return;
  }
  if (!answer.configs.length) box.append(el("p", { class: "muted" }, "No push config."));
  for (const config of answer.configs) {
    const deliveries = el("div", { class: "scroll" });
    const refresh = el("button", { type: "button", class: "link refresh" }, "Refresh deliveries");
    refresh.addEventListener("click", () => showDeliveries(base, config, deliveries, null));
    const auth = config.authentication ? `auth ${config.authentication.scheme}` : "no auth";
    box.append(
      el(
        "div",
        { class: "artifact push-config", dataset: { configId: config.id } },
        el("div", { class: "title mono" }, config.url),
        el(
          "div",
          { class: "meta" },
          el("span", {}, `A2A ${config.version}`),
          el("span", { class: "mono" }, config.id),
          el("span", {}, auth),
          config.hasToken ? el("span", {}, "token") : null,
          el("span", {}, when(config.createdAt)),
        ),
        deliveries,
        refresh,
      ),
    );
    showDeliveries(base, config, deliveries, null);
  }
}

const DELIVERY_COLUMNS = ["id", "seq", "kind", "state", "attempts", "lastStatus", "lastError", "nextAttemptAt", "deliveredAt"];
const DELIVERY_LABELS = ["Delivery", "Seq", "Kind", "State", "Attempts", "Last status", "Last error", "Next attempt", "Delivered", ""];
const DELIVERY_TIMES = new Set(["nextAttemptAt", "deliveredAt"]);

function deliveryCell(delivery, column) {
  const value = delivery[column];
  if (value === null || value === undefined) return el("td", { dataset: { column } }, "—");
  if (column === "id") return el("td", { class: "mono", dataset: { column } }, value);
  if (DELIVERY_TIMES.has(column)) return el("td", { dataset: { column } }, el("time", { datetime: value }, when(value)));
  if (column === "state") return el("td", { dataset: { column } }, stateBadge(value));
  return el("td", { dataset: { column } }, String(value));
}

// One page of a config's deliveries. While the first page shows a pending delivery it is read
// again, backing off from 0.5 s to 10 s, until each one is settled or the page leaves the task.
async function showDeliveries(base, config, into, cursor, delay = 500) {
  const generation = String(Number(into.dataset.generation || 0) + 1);
  into.dataset.generation = generation;
  const query = new URLSearchParams({ limit: "50" });
  if (cursor) query.set("cursor", cursor);
  const path = `${base}/push-configs/${encodeURIComponent(config.id)}/deliveries`;
  let page;
  try {
    page = await api(`${path}?${query}`);
  } catch (error) {
    clear(into).append(el("p", { class: "error" }, describe(error).join(": ")));
    return;
  }
  if (into.dataset.generation !== generation) return; // a newer read took over
  const rows = page.deliveries.map((delivery) => {
    const redo = el("button", { type: "button", class: "redeliver" }, "Redeliver");
    redo.hidden = !["dead", "delivered"].includes(delivery.state);
    redo.addEventListener("click", async () => {
      hideError();
      redo.disabled = true;
      try {
        await api(`${path}/${encodeURIComponent(delivery.id)}/redeliver`, { method: "POST" });
        await showDeliveries(base, config, into, null);
      } catch (error) {
        showError(error);
        redo.disabled = false;
      }
    });
    const cells = DELIVERY_COLUMNS.map((column) => deliveryCell(delivery, column));
    return el("tr", { dataset: { deliveryId: delivery.id, state: delivery.state } }, cells, el("td", {}, redo));
  });
  const head = el("tr", {}, DELIVERY_LABELS.map((label) => el("th", {}, label)));
  const table = el("table", { class: "deliveries" }, head, rows);
  clear(into).append(rows.length ? table : el("p", { class: "muted" }, "No delivery yet."));
  if (page.nextCursor) {
    const more = el("button", { type: "button", class: "link" }, "More");
    more.addEventListener("click", () => showDeliveries(base, config, into, page.nextCursor));
    into.append(more);
  }
  if (!cursor && page.deliveries.some((delivery) => delivery.state === "pending")) {
    setTimeout(() => {
      if (into.dataset.generation === generation && current.base === base) {
        showDeliveries(base, config, into, null, Math.min(delay * 2, 10000));
      }
    }, delay);
  }
}

// ---- start ----

async function start() {
  $("sign-in-form").addEventListener("submit", signInWithToken);
  $("sign-out").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    location.href = "console";
  });
  $("filters").addEventListener("submit", applyFilters);
  $("f-clear").addEventListener("click", () => {
    location.search = "view=tasks";
  });
  $("register-form").addEventListener("submit", registerAgent);
  $("reply-form").addEventListener("submit", sendReply);
  $("cancel").addEventListener("click", cancelTask);

  // A sign-in link: #code=… (the fragment never reaches a server); drop it at once.
  const code = new URLSearchParams(location.hash.slice(1)).get("code");
  if (code) {
    history.replaceState(null, "", location.pathname + location.search);
    try {
      await exchangeCode(code);
    } catch (error) {
      showSignIn();
      showError(error);
      return;
    }
  }
  if (!token()) {
    showSignIn();
    return;
  }
  route();
}

start();
