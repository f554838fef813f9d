// Boot, routing, sign-in and the protocol handlers that tie store, connection and views.

import { Actions } from "./actions.js";
import { ChatView } from "./chatView.js";
import { Connection, newId } from "./connection.js";
import { renderList } from "./listView.js";
import { NewConversationView } from "./newConversation.js";
import { emptyText, freshnessText, promptsAllowed } from "./sessionState.js";
import { Store } from "./store.js";
import { errorText } from "./errorWords.js";

const TOKEN_KEY = "relaybus.token";
// blocks_only: the server leaves out event.data, which this client never reads when blocks
// are present (render doctrine), saving most of the bytes on a phone.
const CAPABILITIES = ["session_subscriptions", "turn_status_observe", "blocks_only"];
const USER_TYPES = new Set(["user", "text", "message"]);

const $ = (sel) => document.querySelector(sel);
const store = new Store();
let link = { welcomed: false, resumed: false, gapReset: false }; // per connection
const fresh = { state: "connecting", retryInMs: 0, catchingUp: 0 }; // what the header says

// ---- token ---------------------------------------------------------------------------

/** decodeURIComponent that never throws (a malformed link must not stop the client). */
function decode(text) {
  try {
    return decodeURIComponent(text);
  } catch {
    return null;
  }
}

/**
 * A sign-in link carries the token in the fragment (`/#token=…`: never sent to a server,
 * never in a Referer or an access log); `?token=` links still work. Either way the token
 * is stored on the device and removed from the address bar.
 */
function takeTokenFromUrl() {
  const url = new URL(location.href);
  const frag = /^#token=([^&]*)/.exec(url.hash);
  const t = frag ? decode(frag[1]) : url.searchParams.get("token");
  if (t === null && !frag && !url.searchParams.has("token")) return;
  if (t) localStorage.setItem(TOKEN_KEY, t);
  url.searchParams.delete("token");
  if (frag) url.hash = "#/";
  history.replaceState(history.state, "", `${url.pathname}${url.search}${url.hash}`);
}

const token = () => localStorage.getItem(TOKEN_KEY) ?? "";

// ---- views ---------------------------------------------------------------------------

function toast(text) {
  const el = document.createElement("div");
  el.className = "toast";
  el.setAttribute("role", "alert");
  el.textContent = text;
  $("#toasts").append(el);
  setTimeout(() => el.remove(), 6000);
}

const chatView = new ChatView($("#chat-view"), {
  onStop: () => actions.stopTurn(),
  onSend: (text) => actions.sendPrompt(text),
  onDecision: (item, d) => actions.decide(item, d),
  onDismiss: (p) => {
    const chat = store.chat;
    if (!chat) return;
    chat.pending = chat.pending.filter((x) => x !== p);
    chatView.drawPending(chat.pending);
  },
});

let listQueued = false;
function drawList() {
  if (listQueued) return;
  listQueued = true;
  requestAnimationFrame(() => {
    listQueued = false;
    if (!store.listed) return;
    renderList($("#sessions"), $("#empty"), store.sorted(), Date.now(), (e, sid) => {
      e.preventDefault();
      location.hash = `#/s/${encodeURIComponent(sid)}`;
    }, emptyText(store.hosts));
    const hosts = store.hosts;
    $("#new-conv").hidden = Array.isArray(hosts) && !hosts.some((x) => promptsAllowed(hosts, x.host));
    if (!$("#list-loading").hidden) performance.mark("relaybus:list-painted"); // first paint, for bench/
    $("#list-loading").hidden = true;
  });
}

function sessionInfo(sid) {
  return store.sessions.get(sid) ?? { id: sid };
}

function drawTurn() {
  const chat = store.chat;
  if (!chat) return;
  chatView.access(sessionInfo(chat.sessionId), store.hosts);
  chatView.turn(sessionInfo(chat.sessionId), store.interruptUnavailable.has(chat.sessionId));
}

const newConvView = new NewConversationView($("#newconv-view"), {
  onStart: ({ host, cwd, text }) => {
    const frame = { type: "new_conversation", host };
    if (cwd) frame.cwd = cwd;
    return actions.request(frame, { kind: "newconv", text });
  },
});

function showSignin(message) {
  $("#signin").hidden = false;
  $("#signin-msg").textContent = message ?? "";
  $("#list-view").hidden = true;
  newConvView.hide();
  chatView.hide();
}

// ---- connection ----------------------------------------------------------------------

function hello() {
  const frame = { type: "hello", capabilities: CAPABILITIES };
  if (token()) frame.token = token();
  link = { welcomed: false, resumed: false, gapReset: false };
  if (store.epoch) {
    frame.epoch = store.epoch;
    frame.lastSeqId = store.lastSeqId;
    link.resumed = true;
  }
  return frame;
}

function showStatus(s) {
  document.body.dataset.conn = s.state;
  if (s.state === "unauthorized") {
    $("#conn").hidden = true;
    showSignin(token() ? "That token was not accepted." : "This server needs a token.");
    return;
  }
  Object.assign(fresh, { state: s.state, retryInMs: s.retryInMs ?? 0 });
  if (s.state !== "open") fresh.catchingUp = 0;
  drawFreshness();
}

/** The header's freshness line: reconnecting, or how many missed events are replaying. */
function drawFreshness() {
  const el = $("#conn");
  const text = freshnessText(fresh);
  // The very first connect is the loading screen's job, not a "reconnecting" banner.
  el.hidden = !text || (fresh.state === "connecting" && !store.epoch);
  $("#conn-text").textContent = text;
  $("#retry").hidden = fresh.state !== "waiting";
  el.classList.toggle("catching", fresh.state === "open" && fresh.catchingUp > 0);
}

const conn = new Connection({
  url: () => {
    const u = new URL("ws", location.href);
    u.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    return u.href;
  },
  hello,
  afterHello: () => [{ type: "list_sessions", requestId: newId("l") }],
  onMessage: handle,
  onStatus: showStatus,
});
const actions = new Actions({ store, conn, chatView, toast, drawTurn });

function watch(sid, sinceSeqId) {
  const frame = { type: "watch_session", requestId: newId("w"), traceId: newId("t"), sessionId: sid };
  if (sinceSeqId > 0) frame.sinceSeqId = sinceSeqId;
  actions.track(frame.requestId, { kind: "watch", sid });
  conn.send(frame);
}

// ---- protocol handlers ---------------------------------------------------------------

function handle(msg) {
  switch (msg.type) {
    case "welcome":
      return onWelcome(msg);
    case "sessions":
      store.setSessions(msg.sessions);
      store.hosts = Array.isArray(msg.hosts) ? msg.hosts : null;
      store.noteSeq(msg.seqId);
      if (fresh.catchingUp) {
        fresh.catchingUp = 0; // the resume replay was sent before this answer
        drawFreshness();
      }
      drawList();
      if (!$("#newconv-view").hidden) newConvView.show(store.sorted(), store.hosts);
      if (store.chat) chatView.header(sessionInfo(store.chat.sessionId));
      return drawTurn();
    case "session_started":
      store.noteSeq(msg.seqId);
      store.upsert(msg.sessionId, {
        cwd: msg.cwd,
        entrypoint: msg.entrypoint,
        host: msg.host,
        title: msg.title || undefined,
        firstPrompt: msg.firstPrompt || undefined,
        startedAt: msg.startedAt,
        lastActivity: Math.max(Number(sessionInfo(msg.sessionId).lastActivity) || 0, Number(msg.startedAt) || 0) || undefined,
        live: true,
      });
      return drawList();
    case "session_ended":
      store.noteSeq(msg.seqId);
      store.upsert(msg.sessionId, { live: false });
      drawList();
      if (store.chat?.sessionId === msg.sessionId) chatView.header(sessionInfo(msg.sessionId));
      return undefined;
    case "session_updated": // the session's SessionInfo changed (title, cwd, state, live…)
      return onSessionUpdated(msg);
    case "watch_ack":
      return onWatchAck(msg);
    case "new_conversation_ack":
      return onNewConversation(msg);
    case "turn_status":
      store.noteSeq(msg.seqId);
      store.applyTurnStatus(msg);
      drawList();
      if (store.chat?.sessionId === msg.sessionId) drawTurn();
      return undefined;
    case "session_event":
      return onSessionEvent(msg);
    case "permission_request":
      return actions.onPermission(msg);
    case "permission_resolved":
      return actions.onResolved(msg);
    case "gap_detected":
      return onGap(msg);
    case "prompt_sent":
      return actions.onPromptSent(msg);
    case "interrupt_ack":
      return actions.onInterruptAck(msg);
    case "error":
      if (msg.code !== "unauthorized") return actions.onError(msg);
      conn.stop();
      return showSignin(token() ? "That token was not accepted." : "This server needs a token.");
    default:
      actions.take(msg.requestId); // acks we need nothing from
      return undefined; // open union: unknown messages are ignored
  }
}

function onSessionUpdated(msg) {
  const info = msg.session;
  const sid = typeof msg.sessionId === "string" ? msg.sessionId : info?.id;
  if (!info || typeof info !== "object" || typeof sid !== "string") return;
  store.noteSeq(msg.seqId);
  store.upsert(sid, { ...info, id: sid });
  drawList();
  if (store.chat?.sessionId === sid) {
    chatView.header(sessionInfo(sid));
    drawTurn();
  }
}

function onWatchAck(msg) {
  actions.take(msg.requestId);
  const chat = store.chat;
  if (!chat || msg.sessionId !== chat.sessionId || msg.watching !== true) return;
  chat.watchHead = Number(msg.seqId) || 0; // session events above it are live
  const host = sessionInfo(chat.sessionId).host;
  if (msg.historyLoaded !== false && sessionInfo(chat.sessionId).historyLoaded === false) {
    store.upsert(chat.sessionId, { historyLoaded: true }); // published now: a recent session
  }
  chatView.history(
    msg.historyLoaded === false
      ? `This session's history could not be loaded${host ? ` (${host} is offline or too old)` : ""}; new events will appear here.`
      : "",
  );
  const first = store.firstPrompt;
  if (first?.sid === chat.sessionId) {
    store.firstPrompt = null;
    actions.sendPrompt(first.text);
  }
}

function onNewConversation(msg) {
  const req = actions.take(msg.requestId);
  if (!msg.ok || typeof msg.sessionId !== "string") {
    newConvView.busy(false);
    toast(errorText(msg.errorCode, msg.message));
    return;
  }
  const now = Date.now();
  store.upsert(msg.sessionId, {
    id: msg.sessionId,
    host: msg.host,
    cwd: msg.cwd,
    firstPrompt: req?.text,
    startedAt: now,
    lastActivity: now,
    live: true,
  });
  if (req?.text) store.firstPrompt = { sid: msg.sessionId, text: req.text };
  newConvView.reset();
  location.hash = `#/s/${encodeURIComponent(msg.sessionId)}`;
}

function onWelcome(msg) {
  conn.markHealthy();
  const epochChanged = store.epoch !== null && msg.epoch !== store.epoch;
  if (link.resumed && !epochChanged && Number(msg.seqId) > store.lastSeqId) {
    fresh.catchingUp = Number(msg.seqId) - store.lastSeqId; // replayed before our list_sessions answer
    drawFreshness();
  }
  store.epoch = msg.epoch ?? null;
  if (epochChanged) {
    store.lastSeqId = 0;
    if (store.chat && !link.gapReset) resetChat({ reason: "epoch" });
  }
  if (!link.resumed || epochChanged) store.noteSeq(msg.seqId);
  link.welcomed = true;
  if (store.chat) watch(store.chat.sessionId, store.chat.lastSeqId);
}

function resetChat(gap) {
  const chat = store.chat;
  chat.resetWithGap(gap);
  link.gapReset = true;
  chatView.renderAll(chat.items);
}

function onGap(msg) {
  const chat = store.chat;
  if (msg.sessionId && chat?.sessionId !== msg.sessionId) return;
  if (!msg.sessionId && msg.reason === "epoch") store.lastSeqId = 0;
  if (!chat) return;
  if (!msg.sessionId && link.gapReset) return; // already reloaded on this connection
  resetChat(msg);
  if (link.welcomed) watch(chat.sessionId, 0);
}

function textOf(blocks) {
  return blocks.filter((b) => b?.kind === "text").map((b) => String(b.text ?? ""));
}

function onSessionEvent(msg) {
  const chat = store.chat;
  if (!chat || msg.sessionId !== chat.sessionId) return;
  const ev = msg.event && typeof msg.event === "object" ? msg.event : { type: "unknown" };
  if (ev.type === "ai-title" && typeof ev.title === "string" && ev.title.trim()) {
    store.upsert(chat.sessionId, { title: ev.title });
    chatView.header(sessionInfo(chat.sessionId));
    drawList();
  }
  const item = { kind: "event", seqId: msg.seqId, event: ev };
  const res = chat.add(item);
  if (!res.added) return;
  if (chat.watchHead && msg.seqId > chat.watchHead && !ev.sidechain) {
    store.upsert(chat.sessionId, { lastActivity: Date.now() }); // a live line: not stale
    drawTurn();
  }
  if (USER_TYPES.has(ev.type) && Array.isArray(ev.blocks) && !ev.sidechain) {
    const texts = textOf(ev.blocks);
    const now = Date.now();
    const echo = chat.matchEcho(texts.join("\n"), now) ?? texts.map((t) => chat.matchEcho(t, now)).find(Boolean);
    if (echo) chatView.drawPending(chat.pending);
  }
  if (res.inOrder) chatView.append(item, res.trimmedBelow);
  else chatView.renderAll(chat.items);
}

// ---- routing -------------------------------------------------------------------------

function route() {
  const m = /^#\/s\/(.+)$/.exec(location.hash);
  const sid = m ? decode(m[1]) : null; // a malformed link (%E0%A4%A) shows the list
  const creating = location.hash === "#/new";
  const cur = store.chat?.sessionId ?? null;
  if (cur && cur !== sid) {
    conn.send({ type: "unwatch_session", requestId: newId("u"), sessionId: cur });
    store.closeChat();
  }
  if (creating) {
    chatView.hide();
    $("#list-view").hidden = true;
    newConvView.show(store.sorted(), store.hosts);
    document.title = "New conversation · relaybus";
    return;
  }
  newConvView.hide();
  if (!sid) {
    chatView.hide();
    $("#list-view").hidden = false;
    document.title = "relaybus";
    drawList();
    // Titles of unwatched sessions are not broadcast: refresh the list on the way back.
    if (cur && link.welcomed) conn.send({ type: "list_sessions", requestId: newId("l") });
    return;
  }
  $("#list-view").hidden = true;
  if (cur === sid) return;
  store.openChat(sid);
  chatView.show(sessionInfo(sid));
  drawTurn();
  if (sessionInfo(sid).historyLoaded === false) {
    const host = sessionInfo(sid).host;
    chatView.history(`Loading this session's history${host ? ` from ${host}` : ""}…`);
  }
  if (link.welcomed) watch(sid, 0);
}

function boot() {
  takeTokenFromUrl();
  $("#signin-form").addEventListener("submit", (e) => {
    e.preventDefault();
    localStorage.setItem(TOKEN_KEY, $("#token").value.trim());
    $("#token").value = "";
    $("#signin").hidden = true;
    route();
    conn.stop();
    conn.start();
  });
  $("#signout").addEventListener("click", () => {
    localStorage.removeItem(TOKEN_KEY);
    conn.stop();
    showSignin("Signed out.");
  });
  $("#retry").addEventListener("click", () => conn.retryNow());
  $("#back").addEventListener("click", () => {
    location.hash = "#/";
  });
  $("#nc-back").addEventListener("click", () => {
    location.hash = "#/";
  });
  $("#new-conv").addEventListener("click", () => {
    location.hash = "#/new";
  });
  window.addEventListener("hashchange", route);
  const wake = () => conn.checkAlive({ type: "list_sessions", requestId: newId("l") });
  window.addEventListener("online", wake);
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") wake();
  });
  setInterval(() => {
    if (!$("#list-view").hidden) drawList(); // "working 3m" and staleness move on
    actions.expirePermissions(Date.now());
  }, 5_000);
  route();
  conn.start();
  // The service worker fetches the whole shell: let the first paint go first.
  setTimeout(registerServiceWorker, 2000);
}

function registerServiceWorker() {
  if ("serviceWorker" in navigator) navigator.serviceWorker.register("sw.js").catch(() => {});
}

boot();
