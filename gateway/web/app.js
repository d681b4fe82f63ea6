// shardwire's web page (gateway/web/, served by `shardwire serve`; docs/api.md, "Web page").
//
// Chat: POST /v1/chat/completions with "stream": true, read as server-sent
// events; Stop aborts the fetch, which closes the connection, and the gateway
// cancels the generation on the cluster (the head frees the session at every
// stage). The sampling fields start empty and take the gateway's defaults
// from GET /v1/defaults (the page keeps no copy of them). Cluster: GET
// /v1/cluster every second. The API key is asked once and kept in
// sessionStorage (this tab only); every API call sends it as a Bearer token.
// The chats (a list of past conversations) and the settings stay in this
// browser's localStorage across reloads. Replies are shown as Markdown
// (md.js); text from the model or the cluster is only ever set as
// textContent, never parsed as HTML.
"use strict";
(() => {
  const KEY = "shardwire-api-key";
  const $ = (id) => document.getElementById(id);
  let apiKey = sessionStorage.getItem(KEY) || "";
  let noKey = false; // the gateway runs with --insecure-no-api-key (loopback only)
  let convo = []; // the conversation: {role, content}
  const STORE = "shardwire-chats"; // localStorage: [{id, title, updated, convo}]
  const CURRENT = "shardwire-chat-current";
  const SETTINGS = "shardwire-settings"; // localStorage: {input id: value}
  const MAX_CHATS = 50; // the oldest beyond this are dropped
  let chatId = localStorage.getItem(CURRENT) || "";
  let running = null; // the AbortController of the generation in flight
  let clusterTimer = null;
  let prev = null; // the previous /v1/cluster answer and when it came (for rates)

  // ---- the key ------------------------------------------------------------------------------

  function authHeaders() {
    return { Authorization: "Bearer " + apiKey, "Content-Type": "application/json" };
  }

  function askKey(message) {
    sessionStorage.removeItem(KEY);
    apiKey = "";
    $("key-error").textContent = message || "";
    $("key-dialog").hidden = false;
    $("key-input").focus();
  }

  $("key-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const k = $("key-input").value.trim();
    if (!k) return;
    $("key-error").textContent = "checking the key…";
    let r;
    try {
      r = await fetch("/v1/models", { headers: { Authorization: "Bearer " + k } });
    } catch (err) {
      $("key-error").textContent = "the gateway did not answer: " + err.message;
      return;
    }
    if (r.status === 401) {
      $("key-error").textContent =
        "Refused: the gateway does not know this key (401). Use a line of its --api-key-file.";
      $("key-input").select();
      return;
    }
    apiKey = k;
    sessionStorage.setItem(KEY, k);
    $("key-input").value = "";
    $("key-error").textContent = "";
    $("key-dialog").hidden = true;
    await authorized(r);
    if (!$("view-cluster").hidden) pollCluster();
  });
  $("change-key").addEventListener("click", () => askKey(""));

  // ---- the gateway's defaults -------------------------------------------------------------

  // The request fields the side panel holds: their names in GET /v1/defaults, their inputs.
  const FIELDS = {
    temperature: "temperature",
    top_p: "top-p",
    top_k: "top-k",
    min_p: "min-p",
    repeat_penalty: "repeat-penalty",
    max_tokens: "max-tokens",
  };

  // What /v1/defaults gave each field (by id): a field left at it is not kept (saveSettings),
  // so that the page follows the gateway when its operator changes a default.
  const served = {};

  // Fills the empty fields with what the gateway gives a request that leaves them out, and
  // sets each field's range; a field the user already filled keeps its value.
  async function loadDefaults() {
    try {
      const r = await fetch("/v1/defaults", { headers: authHeaders() });
      if (!r.ok) return;
      const j = await r.json();
      for (const [name, id] of Object.entries(FIELDS)) {
        const e = $(id);
        const range = (j.ranges || {})[name];
        if (range) {
          e.min = String(range[0]);
          e.max = String(range[1]);
        }
        if (typeof j[name] === "number") served[id] = String(j[name]);
        if (e.value === "" && typeof j[name] === "number") e.value = String(j[name]);
      }
      document.body.dataset.defaults = "1";
    } catch (err) {
      /* the fields stay empty: a request leaves them out and gets the same defaults */
    }
  }

  // The gateway took the key (or needs none): the defaults and the models.
  function authorized(r) {
    document.body.dataset.authorized = "1";
    loadDefaults();
    return showModels(r);
  }

  // ---- models and health ------------------------------------------------------------------

  async function showModels(r) {
    const sel = $("model");
    const keep = sel.value;
    sel.textContent = "";
    let ids = [];
    if (r.ok) {
      const j = await r.json();
      ids = (j.data || []).map((m) => m.id);
    }
    for (const id of ids) {
      const o = document.createElement("option");
      o.value = o.textContent = id;
      sel.appendChild(o);
    }
    if (!ids.length) {
      const o = document.createElement("option");
      o.value = "";
      o.textContent = r.ok ? "(no head is connected yet)" : "(the relay does not answer)";
      sel.appendChild(o);
    } else if (ids.includes(keep)) {
      sel.value = keep;
    } else {
      let kept = "";
      try {
        kept = (JSON.parse(localStorage.getItem(SETTINGS) || "{}") || {}).model || "";
      } catch (err) {
        kept = "";
      }
      if (ids.includes(kept)) sel.value = kept;
    }
  }

  async function refreshModels() {
    if (!apiKey && !noKey) return;
    try {
      const r = await fetch("/v1/models", { headers: authHeaders() });
      if (r.status === 401) return askKey("The gateway no longer accepts this key (401).");
      await showModels(r);
    } catch (err) {
      /* the health line says so */
    }
  }

  // /health's three states (docs/api.md): ok, degraded (a gap in a pipeline, no head), down.
  async function health() {
    const h = $("health");
    try {
      const r = await fetch("/health");
      const j = await r.json();
      const st = ["ok", "degraded", "down"].includes(j.status) ? j.status : "down";
      h.className = "health " + st;
      h.dataset.status = st;
      const n = `${j.nodes} node${j.nodes === 1 ? "" : "s"}, ${j.heads} head${j.heads === 1 ? "" : "s"}`;
      h.textContent = st === "ok" ? `ok · ${n}` : `${st}: ${j.error || n}`;
      h.title = (j.gaps || []).join("\n") || "the gateway's /health";
      if (r.ok && (apiKey || noKey) && !$("model").value) refreshModels();
    } catch (err) {
      h.className = "health down";
      h.dataset.status = "down";
      h.textContent = "down: the gateway does not answer";
    }
  }

  // ---- chats kept in the browser ----------------------------------------------------------

  function loadChats() {
    try {
      const list = JSON.parse(localStorage.getItem(STORE) || "[]");
      return Array.isArray(list) ? list.filter((c) => c && c.id && Array.isArray(c.convo)) : [];
    } catch (err) {
      return [];
    }
  }

  // Stores the current conversation (a chat without a message is not kept).
  function saveChat() {
    let list = loadChats().filter((c) => c.id !== chatId);
    if (convo.length) {
      if (!chatId) chatId = "c" + Date.now().toString(36) + Math.random().toString(36).slice(2, 6);
      const first = convo.find((m) => m.role === "user");
      const title = (first ? first.content : "chat").replace(/\s+/g, " ").trim().slice(0, 60);
      list.unshift({ id: chatId, title, updated: Date.now(), convo });
    }
    list = list.slice(0, MAX_CHATS);
    try {
      localStorage.setItem(STORE, JSON.stringify(list));
      localStorage.setItem(CURRENT, chatId);
    } catch (err) {
      /* storage full or off: the chat still works, it is only not kept */
    }
    drawChats();
  }

  function drawChats() {
    const ul = $("chats");
    ul.textContent = "";
    const list = loadChats();
    if (!list.length) {
      const li = document.createElement("li");
      li.className = "empty";
      li.textContent = "no chats yet";
      ul.appendChild(li);
    }
    for (const c of list) {
      const li = document.createElement("li");
      li.dataset.chat = c.id;
      if (c.id === chatId) li.className = "current";
      const open = document.createElement("button");
      open.type = "button";
      open.className = "open";
      open.textContent = c.title || "chat";
      open.title = `${c.title}\n${new Date(c.updated).toLocaleString()} · ${c.convo.length} messages`;
      open.addEventListener("click", () => switchChat(c.id));
      const del = document.createElement("button");
      del.type = "button";
      del.className = "del";
      del.textContent = "×";
      del.title = "delete this chat";
      del.setAttribute("aria-label", "delete chat " + c.title);
      del.addEventListener("click", () => deleteChat(c.id));
      li.append(open, del);
      ul.appendChild(li);
    }
  }

  function switchChat(id) {
    if (running) running.abort();
    const c = loadChats().find((x) => x.id === id);
    chatId = c ? c.id : "";
    convo = c ? c.convo.slice() : [];
    localStorage.setItem(CURRENT, chatId);
    drawConvo();
    drawChats();
    document.body.classList.remove("settings-open");
  }

  function deleteChat(id) {
    const list = loadChats().filter((c) => c.id !== id);
    localStorage.setItem(STORE, JSON.stringify(list));
    if (id === chatId) switchChat("");
    else drawChats();
  }

  // The settings panel's fields, kept as the user leaves them.
  const KEPT = ["temperature", "top-p", "top-k", "min-p", "repeat-penalty", "max-tokens", "seed",
    "draft", "system", "model"];

  function restoreSettings() {
    let s = {};
    try {
      s = JSON.parse(localStorage.getItem(SETTINGS) || "{}") || {};
    } catch (err) {
      s = {};
    }
    for (const id of KEPT) {
      if (typeof s[id] !== "string" || id === "model") continue;
      $(id).value = s[id];
    }
    return s;
  }

  // Keeps what the user set: a field still at the gateway's default is left out.
  function saveSettings() {
    const s = {};
    for (const id of KEPT) {
      const v = $(id).value;
      if (v !== "" && v !== served[id]) s[id] = v;
    }
    try {
      localStorage.setItem(SETTINGS, JSON.stringify(s));
    } catch (err) {
      /* not kept */
    }
  }
  for (const id of KEPT) $(id).addEventListener("change", saveSettings);

  // ---- chat -------------------------------------------------------------------------------

  // Shows text in a message: Markdown for the model's replies, plain text for the user's.
  function setText(m, role, text) {
    m.el.dataset.raw = text;
    if (role === "assistant") window.swMarkdown.render(text, m.body);
    else m.body.textContent = text;
  }

  function addMessage(role, text) {
    const el = document.createElement("div");
    el.className = "msg " + role;
    const who = document.createElement("div");
    who.className = "who";
    who.textContent = role === "user" ? "you" : $("model").value || "assistant";
    const body = document.createElement("div");
    body.className = "text";
    const stats = document.createElement("div");
    stats.className = "stats";
    const actions = document.createElement("div");
    actions.className = "actions";
    el.append(who, body, stats, actions);
    $("messages").appendChild(el);
    const m = { el, body, stats, actions };
    setText(m, role, text);
    return m;
  }

  function action(m, label, id, fn) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "link";
    b.id = id;
    b.textContent = label;
    b.addEventListener("click", fn);
    m.actions.appendChild(b);
  }

  // Redraws the conversation; the last turn gets Edit (the user's message) and Regenerate.
  function drawConvo() {
    $("messages").textContent = "";
    for (const msg of convo) {
      const m = addMessage(msg.role, msg.content);
      m.el.dataset.state = "done";
      if (msg.stats) m.stats.textContent = msg.stats;
    }
    lastTurnActions();
    scrollEnd();
  }

  // Edit on the last user message and Regenerate on the reply after it, among the turns that
  // are part of the conversation (a failed turn is not).
  function lastTurnActions() {
    for (const b of document.querySelectorAll(".msg .actions button")) b.remove();
    const kept = [...document.querySelectorAll(".msg:not(.failed)")];
    const u = kept.filter((e) => e.classList.contains("user")).pop();
    const a = kept.filter((e) => e.classList.contains("assistant")).pop();
    const wrap = (e) => ({ actions: e.querySelector(".actions") });
    if (u) action(wrap(u), "Edit", "edit-last", editLast);
    if (a && u && u.compareDocumentPosition(a) & Node.DOCUMENT_POSITION_FOLLOWING)
      action(wrap(a), "Regenerate", "regenerate", regenerate);
  }

  // The end of the conversation (the last reply's stats or error line) in view.
  function scrollEnd() {
    const box = $("messages");
    box.scrollTop = box.scrollHeight;
  }

  // The last user message back into the composer, it and its reply out of the conversation.
  function editLast() {
    if (running) return;
    const i = convo.map((m) => m.role).lastIndexOf("user");
    if (i < 0) return;
    $("prompt").value = convo[i].content;
    convo = convo.slice(0, i);
    saveChat();
    drawConvo();
    $("prompt").focus();
  }

  // The last reply asked for again (same conversation, the settings as they are now).
  function regenerate() {
    if (running) return;
    if (convo.length && convo[convo.length - 1].role === "assistant") convo.pop();
    const i = convo.map((m) => m.role).lastIndexOf("user");
    if (i < 0) return;
    const text = convo[i].content;
    convo = convo.slice(0, i);
    send(text);
  }

  // A number from an input, or undefined when it is empty or not a number.
  function num(id, integer) {
    const v = $(id).value.trim();
    if (v === "") return undefined;
    const x = integer ? parseInt(v, 10) : parseFloat(v);
    return Number.isFinite(x) ? x : undefined;
  }

  function requestBody() {
    const sys = $("system").value.trim();
    const msgs = (sys ? [{ role: "system", content: sys }] : []).concat(
      convo.map((m) => ({ role: m.role, content: m.content })));
    const body = {
      model: $("model").value,
      messages: msgs,
      stream: true,
      stream_options: { include_usage: true },
      temperature: num("temperature"),
      top_p: num("top-p"),
      max_tokens: num("max-tokens", true),
      seed: num("seed", true),
      repeat_penalty: num("repeat-penalty"),
      shardwire: { top_k: num("top-k", true), min_p: num("min-p"), draft: $("draft").value },
    };
    return JSON.stringify(body); // undefined fields are left out: the gateway's defaults
  }

  function statsLine(n, sw, finish) {
    if (!sw) return `${n} tokens`;
    const tpr = sw.rounds > 0 ? ((n - 1) / sw.rounds).toFixed(2) : "–";
    const parts = [
      `${n} tokens`,
      `${sw.decode_tok_s.toFixed(1)} tok/s`,
      `${tpr} tokens per round trip (${sw.rounds} rounds)`,
    ];
    if (sw.drafted > 0) parts.push(`${sw.accepted} of ${sw.drafted} drafts accepted`);
    parts.push(`first token ${Math.round(sw.ttft_ms)} ms`);
    if (finish === "length") parts.push("max_tokens reached");
    return parts.join(" · ");
  }

  function setRunning(on) {
    $("send").disabled = on;
    $("stop").disabled = !on;
    document.body.dataset.generating = on ? "1" : "";
  }

  // Sends a user message (the composer's, or `again` for Regenerate) and streams the reply.
  async function send(again) {
    const text = typeof again === "string" ? again : $("prompt").value.trim();
    if (!text || running) return;
    if (!apiKey && !noKey) return askKey("");
    if (!$("model").value) await refreshModels();
    if (typeof again !== "string") $("prompt").value = "";
    convo.push({ role: "user", content: text });
    saveChat();
    drawConvo();
    for (const b of document.querySelectorAll(".msg .actions button")) b.remove();
    const u = [...document.querySelectorAll(".msg.user")].pop();
    const m = addMessage("assistant", "");
    m.el.classList.add("streaming");
    m.el.dataset.state = "streaming";
    m.el.dataset.chunks = "0";
    scrollEnd();
    const ctl = new AbortController();
    running = ctl;
    setRunning(true);
    let got = "";
    let chunks = 0;
    let usage = null;
    let sw = null;
    let finish = null;
    let drawn = false;
    const draw = () => {
      drawn = false;
      setText(m, "assistant", got);
      const box = $("messages");
      if (box.scrollHeight - box.scrollTop - box.clientHeight < 120) scrollEnd();
    };
    try {
      const r = await fetch("/v1/chat/completions", {
        method: "POST",
        headers: authHeaders(),
        body: requestBody(),
        signal: ctl.signal,
      });
      if (!r.ok) {
        const e = await r.json().catch(() => null);
        if (r.status === 401) askKey("The gateway refused this key (401).");
        throw new Error(e && e.error ? e.error.message : "HTTP " + r.status);
      }
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let at;
        while ((at = buf.indexOf("\n\n")) >= 0) {
          const event = buf.slice(0, at);
          buf = buf.slice(at + 2);
          for (const line of event.split("\n")) {
            if (!line.startsWith("data: ")) continue; // ": keep-alive" comments
            const data = line.slice(6);
            if (data === "[DONE]") continue;
            const j = JSON.parse(data);
            if (j.error) throw new Error(j.error.message);
            const c = j.choices && j.choices[0];
            if (c && c.delta && c.delta.content) {
              got += c.delta.content;
              chunks++;
              m.el.dataset.raw = got;
              m.el.dataset.chunks = String(chunks);
              if (!drawn) {
                drawn = true;
                requestAnimationFrame(draw);
              }
            }
            if (c && c.finish_reason) finish = c.finish_reason;
            if (j.usage) {
              usage = j.usage;
              sw = j.shardwire || null;
            }
          }
        }
      }
      const stats = statsLine(usage ? usage.completion_tokens : chunks, sw, finish);
      convo.push({ role: "assistant", content: got, stats });
      setText(m, "assistant", got);
      m.stats.textContent = stats;
      m.el.dataset.state = "done";
      saveChat();
    } catch (err) {
      setText(m, "assistant", got);
      if (err.name === "AbortError") {
        m.el.dataset.state = "stopped";
        const stats = "stopped: the generation was cancelled on the cluster";
        m.stats.textContent = stats;
        convo.push({ role: "assistant", content: got, stats });
        saveChat();
      } else {
        // The failed turn is marked and left out of the conversation (the next request does
        // not send it, and it is not kept); its text goes back into the composer to retry.
        m.el.dataset.state = "error";
        m.el.classList.add("failed");
        if (u) u.classList.add("failed", "excluded");
        m.stats.textContent = "failed: " + err.message + " · this turn is not part of the chat;" +
          " the message is back in the box below to send again";
        convo.pop();
        saveChat();
        if (!$("prompt").value) $("prompt").value = text;
      }
    } finally {
      running = null;
      setRunning(false);
      m.el.classList.remove("streaming");
      lastTurnActions();
      scrollEnd();
    }
  }

  $("chat-form").addEventListener("submit", (e) => {
    e.preventDefault();
    send();
  });
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      send();
    }
  });
  $("stop").addEventListener("click", () => {
    if (running) running.abort();
  });
  $("new-chat").addEventListener("click", () => {
    switchChat("");
    $("prompt").focus();
  });
  $("toggle-settings").addEventListener("click", () => {
    const open = document.body.classList.toggle("settings-open");
    $("toggle-settings").setAttribute("aria-expanded", open ? "true" : "false");
  });

  // ---- cluster ----------------------------------------------------------------------------

  function fmtMs(ms) {
    if (ms < 1000) return Math.round(ms) + " ms";
    const s = ms / 1000;
    if (s < 120) return s.toFixed(1) + " s";
    const m = Math.floor(s / 60);
    return m < 120 ? `${m} min ${Math.floor(s % 60)} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
  }

  function cell(tr, text) {
    const td = document.createElement("td");
    td.textContent = text;
    tr.appendChild(td);
    return td;
  }

  function drawPipeline(nodes) {
    const box = $("pipeline");
    box.textContent = "";
    const total = nodes.length ? nodes[0].n_layers : 0;
    if (!total) {
      box.textContent = "no node is connected";
      return;
    }
    let at = 0;
    const seg = (cls, from, to, label, title) => {
      const d = document.createElement("div");
      d.className = "seg " + cls;
      d.style.flex = String(Math.max(to - from, 0.5));
      d.textContent = label;
      d.title = title;
      box.appendChild(d);
    };
    for (const n of nodes) {
      if (n.layer_begin > at) seg("gap", at, n.layer_begin, "missing", `no node holds layers ${at}:${n.layer_begin}`);
      seg(n.role, n.layer_begin, n.layer_end, `${n.name} ${n.layer_begin}:${n.layer_end}`,
          `${n.name}: ${n.role}, layers ${n.layer_begin}:${n.layer_end} of ${n.n_layers}, ${n.backend}`);
      at = Math.max(at, n.layer_end);
    }
    if (at < total) seg("gap", at, total, "missing", `no node holds layers ${at}:${total}`);
  }

  // Stacked bars: each recent generation's ms per round trip, split four ways.
  function drawChart(recent) {
    const cv = $("split-chart");
    const ctx = cv.getContext("2d");
    const W = cv.width;
    const H = cv.height;
    const css = getComputedStyle(document.documentElement);
    const colors = ["--draft", "--head", "--stages", "--network"].map((v) => css.getPropertyValue(v).trim());
    const keys = ["draft", "head", "stages", "network"];
    const rows = recent.filter((r) => r.split_ms_per_trip).slice(-20);
    ctx.clearRect(0, 0, W, H);
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#667085";
    cv.dataset.bars = String(rows.length);
    if (!rows.length) {
      ctx.fillText("no generation has completed through this gateway yet", 12, H / 2);
      return;
    }
    const totals = rows.map((r) => keys.reduce((s, k) => s + r.split_ms_per_trip[k], 0));
    const max = Math.max(...totals, 1);
    const left = 62;
    const bottom = H - 36;
    const top = 10;
    // the axes' titles: y, ms per round trip; x, each bar one generation with its tokens per trip
    ctx.save();
    ctx.translate(11, (top + bottom) / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "center";
    ctx.fillText("ms per round trip", 0, 0);
    ctx.restore();
    ctx.textAlign = "center";
    const xTitle = "one bar per generation, oldest first; the number under a bar: its tokens per round trip";
    ctx.fillText(xTitle, left + (W - left) / 2, H - 4);
    cv.dataset.axes = "ms per round trip|" + xTitle;
    ctx.textAlign = "left";
    const bw = Math.min(30, (W - left - 10) / rows.length - 6);
    ctx.strokeStyle = "#dde1e7";
    for (let i = 0; i <= 4; i++) {
      const y = bottom - ((bottom - top) * i) / 4;
      ctx.beginPath();
      ctx.moveTo(left, y);
      ctx.lineTo(W - 4, y);
      ctx.stroke();
      ctx.fillText(String(Math.round((max * i) / 4)), 22, y + 4);
    }
    rows.forEach((r, i) => {
      const x = left + 6 + i * (bw + 6);
      let y = bottom;
      keys.forEach((k, j) => {
        const h = ((bottom - top) * r.split_ms_per_trip[k]) / max;
        ctx.fillStyle = colors[j];
        ctx.fillRect(x, y - h, bw, h);
        y -= h;
      });
      ctx.fillStyle = "#667085";
      ctx.fillText(r.tokens_per_round.toFixed(1), x, bottom + 13);
    });
  }

  function render(j, now) {
    const rl = j.relay;
    const g = j.gateway || {};
    // no peer table: the relay did not answer, or (connected) the gateway itself failed
    const table = rl.uptime_ms !== undefined;
    $("cluster-error").textContent = table
      ? ""
      : (rl.connected ? "the gateway could not read the peer table: " : "the relay does not answer: ") +
        (rl.error || "");
    $("c-relay").textContent = !rl.connected ? "down" : table ? "up " + fmtMs(rl.uptime_ms) : "?";
    $("c-relay-sub").textContent = table
      ? `${rl.endpoint} · ${rl.forwarded} forwarded · ${rl.dropped} dropped · ${j.clients} client(s)`
      : rl.endpoint;
    const head = j.nodes.find((n) => n.role === "head" || n.role === "full");
    const models = [...new Set(j.nodes.map((n) => n.model))];
    $("c-model").textContent = models.length ? models.join(", ") : "–";
    $("c-model-sub").textContent = head
      ? `fingerprint ${head.fingerprint.slice(0, 12)}… · ${head.n_layers} layers`
      : j.nodes.length ? "no head connected" : "no node connected";
    $("c-sessions").textContent = `${g.inflight} / ${g.max_inflight}`;
    $("c-sessions-sub").textContent =
      `generating now through this gateway${head ? ` · the head holds up to ${head.max_sessions}` : ""}`;
    if (prev && g.streamed_tokens !== undefined) {
      const dt = (now - prev.at) / 1000;
      const rate = dt > 0 ? (g.streamed_tokens - prev.j.gateway.streamed_tokens) / dt : 0;
      $("c-rate").textContent = rate.toFixed(1);
    }
    $("c-rate-sub").textContent = `${g.streamed_tokens} tokens streamed · ${g.generations} generations`;
    const rec = g.recent || [];
    const last = rec[rec.length - 1];
    $("c-last-tps").textContent = last ? last.decode_tok_s.toFixed(1) + " tok/s" : "–";
    $("c-last-sub").textContent = last
      ? `${last.tokens} tokens · first token ${Math.round(last.ttft_ms)} ms · ${fmtMs(now - last.t_ms)} ago`
      : "none yet";
    $("c-tpr").textContent = last ? last.tokens_per_round.toFixed(2) : "–";
    $("c-tpr-sub").textContent = g.drafted
      ? `drafts accepted ${g.accepted} of ${g.drafted} (${((100 * g.accepted) / g.drafted).toFixed(0)} %)`
      : "no drafts yet";

    drawPipeline(j.nodes);
    const tb = $("nodes").tBodies[0];
    tb.textContent = "";
    for (const n of j.nodes) {
      const tr = document.createElement("tr");
      tr.dataset.node = n.name;
      cell(tr, n.name);
      cell(tr, n.role);
      cell(tr, `${n.layer_begin}:${n.layer_end} of ${n.n_layers}`);
      cell(tr, n.backend);
      cell(tr, fmtMs(n.heartbeat_age_ms)).className = "hb";
      cell(tr, fmtMs(n.idle_ms));
      cell(tr, `${n.msgs_in} / ${n.msgs_out}`).className = "msgs";
      cell(tr, String(n.max_sessions));
      cell(tr, n.role_bound ? "name+role" : n.key_bound ? "name" : "–");
      tb.appendChild(tr);
    }
    // each hop of the pipeline: the relay or a direct link, and its measured round trip
    const hb = $("hops").tBodies[0];
    hb.textContent = "";
    for (const h of j.hops || []) {
      const tr = document.createElement("tr");
      tr.dataset.path = h.path;
      cell(tr, `${h.from} → ${h.to}`);
      cell(tr, h.path === "direct" ? "direct" : `relay ${h.relay}`);
      cell(tr, h.rtt_ms === null ? "not measured" : h.rtt_ms.toFixed(2) + " ms");
      hb.appendChild(tr);
    }
    drawChart(rec);
    const rt = $("recent").tBodies[0];
    rt.textContent = "";
    for (const r of rec.slice(-8).reverse()) {
      const tr = document.createElement("tr");
      const s = r.split_ms_per_trip;
      cell(tr, new Date(r.t_ms).toLocaleTimeString());
      cell(tr, String(r.tokens));
      cell(tr, r.decode_tok_s.toFixed(1));
      cell(tr, r.tokens_per_round.toFixed(2));
      cell(tr, r.drafted ? `${r.accepted} / ${r.drafted}` : "–");
      for (const k of ["draft", "head", "stages", "network"]) cell(tr, s ? s[k].toFixed(1) + " ms" : "–");
      rt.appendChild(tr);
    }
    $("c-updated").textContent = new Date(now).toLocaleTimeString();
    document.body.dataset.clusterPolls = String((+document.body.dataset.clusterPolls || 0) + 1);
  }

  async function pollCluster() {
    clearTimeout(clusterTimer);
    if ($("view-cluster").hidden) return;
    if (apiKey || noKey) {
      try {
        const r = await fetch("/v1/cluster", { headers: authHeaders() });
        if (r.status === 401) {
          askKey("The gateway refused this key (401).");
        } else if (r.ok) {
          const j = await r.json();
          const now = Date.now();
          render(j, now);
          prev = { j, at: now };
        } else {
          $("cluster-error").textContent = "GET /v1/cluster: HTTP " + r.status;
        }
      } catch (err) {
        $("cluster-error").textContent = "the gateway does not answer: " + err.message;
      }
    }
    clusterTimer = setTimeout(pollCluster, 1000);
  }

  // ---- views ------------------------------------------------------------------------------

  function show(view) {
    for (const b of document.querySelectorAll(".tab")) b.classList.toggle("active", b.dataset.view === view);
    $("view-chat").hidden = view !== "chat";
    $("view-cluster").hidden = view !== "cluster";
    document.body.dataset.view = view;
    if (view === "cluster") pollCluster();
    if (location.hash !== "#" + view) window.history.replaceState(null, "", "#" + view);
  }
  for (const b of document.querySelectorAll(".tab")) b.addEventListener("click", () => show(b.dataset.view));

  // ---- start ------------------------------------------------------------------------------

  restoreSettings();
  switchChat(chatId);
  health();
  setInterval(health, 5000);
  show(location.hash === "#cluster" ? "cluster" : "chat");
  if (apiKey) {
    fetch("/v1/models", { headers: authHeaders() }).then((r) => {
      if (r.status === 401) return askKey("The stored key was refused (401): enter it again.");
      return authorized(r);
    }, () => {});
  } else {
    // a gateway without keys (--insecure-no-api-key) answers without one: no dialog
    fetch("/v1/models").then((r) => {
      if (r.status === 401) return askKey("");
      noKey = true;
      return authorized(r);
    }, () => askKey(""));
  }
})();
