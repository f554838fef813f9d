// The DOM side: boot, token, routing, sign-in, and drawing what controller.js reports.

import { ChatView } from "./chatView.js";
import { Connection } from "./connection.js";
import { Controller } from "./controller.js";
import { renderList } from "./listView.js";
import { NewConversationView } from "./newConversation.js";
import { PermissionModeControl } from "./permissionMode.js";
import { emptyText, freshnessText, promptsAllowed } from "./sessionState.js";

const TOKEN_KEY = "relaybus.token";

const $ = (sel) => document.querySelector(sel);

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
  onStop: () => ctl.actions.stopTurn(),
  onSend: (text) => {
    ctl.actions.sendPrompt(text);
    chatView.input.value = "";
  },
  onDecision: (item, d, extra) => ctl.actions.decide(item, d, extra),
  readOnly: () => ctl.store.readOnly,
  onDismiss: (p) => ctl.actions.dismiss(p),
});
const modeControl = new PermissionModeControl($("#chat-view .bar"), {
  request: (frame, meta) => ctl.actions.request(frame, meta),
});

let listQueued = false;
function drawList() {
  if (listQueued) return;
  listQueued = true;
  requestAnimationFrame(() => {
    listQueued = false;
    const store = ctl.store;
    if (!store.listed) return;
    renderList($("#sessions"), $("#empty"), store.sorted(), Date.now(), (e, sid) => {
      e.preventDefault();
      location.hash = `#/s/${encodeURIComponent(sid)}`;
    }, emptyText(store.hosts));
    const hosts = store.hosts;
    // The Notifications sheet (pushSettings.js) offers these machines and titles.
    document.dispatchEvent(new CustomEvent("relaybus:list", { detail: { hosts, sessions: store.sorted() } }));
    $("#new-conv").hidden = Array.isArray(hosts) && !hosts.some((x) => promptsAllowed(hosts, x.host));
    if (!$("#list-loading").hidden) performance.mark("relaybus:list-painted"); // first paint, for bench/
    $("#list-loading").hidden = true;
  });
}

function drawTurn() {
  const chat = ctl.store.chat;
  if (!chat) return;
  const info = ctl.store.info(chat.sessionId);
  chatView.access(info, ctl.store.hosts);
  chatView.turn(info, ctl.store.interruptUnavailable.has(chat.sessionId));
  modeControl.draw(info, chatView.promptsAllowed);
}

const newConvView = new NewConversationView($("#newconv-view"), {
  onStart: (req) => ctl.actions.startConversation(req),
});

function showSignin(message) {
  $("#signin").hidden = false;
  $("#signin-msg").textContent = message ?? "";
  $("#list-view").hidden = true;
  newConvView.hide();
  chatView.hide();
}

/** The header's freshness line: reconnecting, or how many missed events are replaying. */
function drawFreshness(fresh) {
  const el = $("#conn");
  const text = freshnessText(fresh);
  el.hidden = !text || (fresh.state === "connecting" && fresh.first);
  $("#conn-text").textContent = text;
  $("#retry").hidden = fresh.state !== "waiting";
  el.classList.toggle("catching", fresh.state === "open" && fresh.catchingUp > 0);
}

/** @type {import("./controller.js").View} */
const view = {
  list(snapshot) {
    drawList();
    if (snapshot && !$("#newconv-view").hidden) newConvView.show(ctl.store.sorted(), ctl.store.hosts);
  },
  header: (info) => {
    chatView.header(info);
    modeControl.draw(info, chatView.promptsAllowed);
  },
  turn: drawTurn,
  history: (text) => chatView.history(text),
  append: (item, trimmedBelow) => chatView.append(item, trimmedBelow),
  renderAll: (items) => chatView.renderAll(items),
  pending: (pending) => chatView.drawPending(pending),
  permission: (item) => chatView.updatePermission(item),
  freshness: drawFreshness,
  toast,
  signin: showSignin,
  unavailable(retryInMs) {
    const el = $("#list-loading");
    el.textContent = `Server unavailable: relaybus cannot reach its storage (Redis). Retrying every ${Math.round(retryInMs / 1000)} s…`;
    el.classList.add("unavailable");
    el.hidden = false;
  },
  started({ sessionId, error }) {
    if (error !== undefined) {
      newConvView.busy(false);
      toast(error);
      return;
    }
    newConvView.reset();
    location.hash = `#/s/${encodeURIComponent(sessionId)}`;
  },
};

// ---- connection ----------------------------------------------------------------------

const conn = new Connection({
  url: () => {
    const u = new URL("ws", location.href);
    u.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    return u.href;
  },
  hello: () => ctl.hello(),
  afterHello: () => ctl.afterHello(),
  onMessage: (msg) => ctl.handle(msg),
  onStatus: (s) => {
    document.body.dataset.conn = s.state;
    if (s.state === "unauthorized") $("#conn").hidden = true;
    ctl.status(s);
  },
});
const ctl = new Controller({ conn, view, token });

// ---- routing -------------------------------------------------------------------------

function route() {
  const m = /^#\/s\/(.+)$/.exec(location.hash);
  const sid = m ? decode(m[1]) : null; // a malformed link (%E0%A4%A) shows the list
  const left = ctl.leaveUnless(sid);
  if (location.hash === "#/new") {
    chatView.hide();
    $("#list-view").hidden = true;
    newConvView.show(ctl.store.sorted(), ctl.store.hosts);
    document.title = "New conversation · relaybus";
    return;
  }
  newConvView.hide();
  if (!sid) {
    chatView.hide();
    $("#list-view").hidden = false;
    document.title = "relaybus";
    drawList();
    if (left) ctl.refreshList();
    return;
  }
  $("#list-view").hidden = true;
  if (!ctl.open(sid)) return;
  const info = ctl.store.info(sid);
  chatView.show(info);
  drawTurn();
  if (info.historyLoaded === false) {
    chatView.history(`Loading this session's history${info.host ? ` from ${info.host}` : ""}…`);
  }
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
  const wake = () => conn.checkAlive(ctl.listRequest());
  window.addEventListener("online", wake);
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") wake();
  });
  setInterval(() => {
    if (!$("#list-view").hidden) drawList(); // "working 3m" and staleness move on
    ctl.actions.expirePermissions(Date.now());
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
