// The push settings screen: turn notifications on for this device and pick what reaches it
// (events, machines as toggles, muted sessions), and a Mute switch in a chat's header.
// Self-contained: it adds its buttons to the headers in index.html, reads the token the app
// keeps in localStorage and learns the known machines and sessions from the app's
// `relaybus:list` event.

import { knownMachines, mutedRows, pushBlocker } from "./pushPrefs.js";

const TOKEN_KEY = "relaybus.token";
const EVENTS = [
  ["approvals", "Permission requests (Approve / Deny)"],
  ["waiting", "Waiting for you"],
  ["done", "Long turns done"],
  ["notify", "Claude's own notifications"],
  ["failures", "Failures"],
];
const DEFAULTS = ["approvals", "waiting", "done", "notify"];

const token = () => localStorage.getItem(TOKEN_KEY) ?? "";
/** What the session list knows (app.js sends it with each drawn list). */
const known = { hosts: null, sessions: [] };
const supported = () => "serviceWorker" in navigator && "PushManager" in window && "Notification" in window;
const standalone = () =>
  window.matchMedia?.("(display-mode: standalone)").matches || navigator.standalone === true;
const isIos = () => /iPad|iPhone|iPod/.test(navigator.userAgent);

function b64ToBytes(b64) {
  const pad = "=".repeat((4 - (b64.length % 4)) % 4);
  const raw = atob((b64 + pad).replace(/-/g, "+").replace(/_/g, "/"));
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

async function api(method, path, body) {
  const res = await fetch(path, {
    method,
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${token()}` },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(data.message || `HTTP ${res.status}`);
  return data;
}

async function currentSubscription() {
  const reg = await navigator.serviceWorker.ready;
  return reg.pushManager.getSubscription();
}

/** Subscribe this device (asking for permission) and store it with ``prefs``. */
export async function enablePush(prefs) {
  if ((await Notification.requestPermission()) !== "granted") throw new Error("Notifications are blocked for this site");
  const reg = await navigator.serviceWorker.ready;
  const { publicKey } = await fetch("push/key").then((r) => r.json());
  let sub = await reg.pushManager.getSubscription();
  const key = sub?.options?.applicationServerKey;
  if (sub && key && btoa(String.fromCharCode(...new Uint8Array(key))).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "") !== publicKey) {
    await sub.unsubscribe(); // the server's key was rotated
    sub = null;
  }
  sub ??= await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: b64ToBytes(publicKey) });
  return api("PUT", "push/subscription", { subscription: sub.toJSON(), prefs });
}

export async function disablePush() {
  const sub = await currentSubscription();
  if (!sub) return;
  await api("DELETE", "push/subscription", { endpoint: sub.endpoint }).catch(() => null);
  await sub.unsubscribe();
}

function el(tag, attrs = {}, ...kids) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  node.append(...kids);
  return node;
}

function buildDialog() {
  const dlg = el("dialog", { id: "push-settings", class: "push-settings", "aria-labelledby": "push-title" });
  const status = el("p", { id: "push-status", class: "muted small", role: "status" });
  const hint = el("p", { id: "push-ios-hint", class: "muted small", hidden: "" });
  hint.textContent = "On iPhone and iPad: Share → Add to Home Screen, then open relaybus from there to turn notifications on.";
  const events = el("fieldset", {}, el("legend", { text: "Notify me about" }));
  for (const [name, label] of EVENTS) {
    const box = el("input", { type: "checkbox", name: "event", value: name, id: `push-ev-${name}` });
    events.append(el("label", { for: `push-ev-${name}` }, box, ` ${label}`));
  }
  const machines = el("fieldset", { id: "push-machines" }, el("legend", { text: "Machines" }));
  const muted = el("fieldset", { id: "push-muted" }, el("legend", { text: "Muted sessions" }));
  const on = el("button", { id: "push-on", type: "button", text: "Turn on" });
  const off = el("button", { id: "push-off", type: "button", class: "link", text: "Turn off" });
  const close = el("button", { id: "push-close", type: "button", class: "link", text: "Close" });
  dlg.append(
    el("h2", { id: "push-title", text: "Notifications" }),
    status,
    hint,
    events,
    machines,
    muted,
    el("div", { class: "push-buttons" }, on, off, close),
  );
  return dlg;
}

function toggle(name, value, label, checked) {
  const id = `push-${name}-${value.replace(/[^A-Za-z0-9_-]/g, "_")}`;
  const box = el("input", { type: "checkbox", name, value, id });
  box.checked = checked;
  return [box, el("label", { for: id }, box, ` ${label}`)];
}

/** Machines as toggles: "All machines" (no filter), or the ones ticked. */
function showMachines(dlg, picked) {
  const set = dlg.querySelector("#push-machines");
  set.replaceChildren(set.querySelector("legend"));
  const [all, allRow] = toggle("host-all", "all", "All machines", !picked.length);
  set.append(allRow);
  const boxes = knownMachines(known.hosts, known.sessions, picked).map((host) => {
    const [box, row] = toggle("host", host, host, picked.includes(host));
    box.addEventListener("change", () => {
      all.checked = ![...set.querySelectorAll('input[name="host"]')].some((b) => b.checked);
    });
    set.append(row);
    return box;
  });
  all.addEventListener("change", () => {
    if (all.checked) for (const b of boxes) b.checked = false;
    else if (!boxes.some((b) => b.checked)) all.checked = true; // nothing ticked is "all"
  });
}

/** Muted sessions by title; unticking one unmutes it when the settings are saved. */
function showMuted(dlg, muted) {
  const set = dlg.querySelector("#push-muted");
  set.replaceChildren(set.querySelector("legend"));
  const rows = mutedRows(muted, known.sessions);
  if (!rows.length) set.append(el("p", { class: "muted small", text: "None. Mute a session from its own screen." }));
  for (const r of rows) set.append(toggle("muted", r.id, r.title, true)[1]);
}

function readPrefs(dlg) {
  const ticked = (name) => [...dlg.querySelectorAll(`input[name="${name}"]:checked`)].map((b) => b.value);
  return { events: ticked("event"), hosts: ticked("host"), muted: ticked("muted") };
}

function showPrefs(dlg, prefs) {
  for (const box of dlg.querySelectorAll('input[name="event"]')) box.checked = prefs.events.includes(box.value);
  showMachines(dlg, prefs.hosts);
  showMuted(dlg, prefs.muted);
}

/** pushBlocker() of what this page sees (the server's key is fetched only when it matters). */
async function whatIsMissing() {
  const env = {
    secure: window.isSecureContext === true,
    serviceWorker: "serviceWorker" in navigator,
    pushManager: "PushManager" in window,
    notification: "Notification" in window,
    permission: "Notification" in window ? Notification.permission : "default",
    ios: isIos(),
    standalone: standalone(),
    serverKey: true,
  };
  if (pushBlocker(env)) return pushBlocker(env);
  env.serverKey = await fetch("push/key")
    .then((r) => r.ok)
    .catch(() => false);
  return pushBlocker(env);
}

async function refresh(dlg) {
  const status = dlg.querySelector("#push-status");
  dlg.querySelector("#push-ios-hint").hidden = !(isIos() && !standalone());
  const missing = await whatIsMissing();
  if (missing) {
    status.textContent = missing;
    return;
  }
  const sub = await currentSubscription().catch(() => null);
  if (!sub) {
    showPrefs(dlg, { events: DEFAULTS, hosts: [], muted: [] });
    status.textContent = "Off on this device.";
    return;
  }
  const found = await api("POST", "push/subscription/get", { endpoint: sub.endpoint }).catch(() => null);
  showPrefs(dlg, found?.prefs ?? { events: DEFAULTS, hosts: [], muted: [] });
  status.textContent = found ? "On for this device." : "Off on this device (turn it on again).";
}

function mount() {
  const bar = document.querySelector("#list-view header.bar");
  if (!bar || document.querySelector("#push-open")) return;
  const dlg = buildDialog();
  document.body.append(dlg);
  const open = el("button", { id: "push-open", type: "button", class: "link", text: "Notifications" });
  bar.insertBefore(open, document.querySelector("#signout"));
  const status = dlg.querySelector("#push-status");
  const run = (fn) => async () => {
    try {
      await fn();
      await refresh(dlg);
    } catch (err) {
      status.textContent = err.message;
    }
  };
  open.addEventListener("click", () => {
    const shown = readPrefs(dlg);
    showMachines(dlg, shown.hosts);
    showMuted(dlg, shown.muted);
    dlg.showModal();
    refresh(dlg);
  });
  dlg.querySelector("#push-on").addEventListener("click", run(() => enablePush(readPrefs(dlg))));
  dlg.querySelector("#push-off").addEventListener("click", run(disablePush));
  dlg.querySelector("#push-close").addEventListener("click", () => dlg.close());
}

const openSid = () => {
  const m = /^#\/s\/([^/?]+)/.exec(location.hash);
  try {
    return m ? decodeURIComponent(m[1]) : null;
  } catch {
    return null; // a malformed link: the app shows the list
  }
};

/** The chat header's Mute/Unmute, shown while this device has push on. */
function mountMute() {
  const bar = document.querySelector("#chat-view header.bar");
  if (!bar || document.querySelector("#push-mute")) return;
  const btn = el("button", { id: "push-mute", type: "button", class: "link mute-switch", role: "switch", hidden: "" });
  bar.append(btn);
  let prefs = null;
  const sync = async () => {
    const sid = openSid();
    const sub = sid && supported() ? await currentSubscription().catch(() => null) : null;
    const found = sub ? await api("POST", "push/subscription/get", { endpoint: sub.endpoint }).catch(() => null) : null;
    prefs = found?.prefs ?? null;
    btn.hidden = !prefs;
    if (!prefs) return;
    const muted = prefs.muted.includes(sid);
    btn.textContent = muted ? "Unmute" : "Mute";
    btn.setAttribute("aria-checked", String(muted));
    btn.title = muted ? "Notifications from this session are muted" : "Mute notifications from this session";
  };
  btn.addEventListener("click", async () => {
    const sid = openSid();
    const sub = await currentSubscription().catch(() => null);
    if (!sid || !sub || !prefs) return;
    const muted = prefs.muted.includes(sid) ? prefs.muted.filter((m) => m !== sid) : [...prefs.muted, sid];
    await api("PUT", "push/subscription", { subscription: sub.toJSON(), prefs: { ...prefs, muted } }).catch(() => null);
    await sync();
  });
  window.addEventListener("hashchange", sync);
  sync();
}

function start() {
  mount();
  mountMute();
  document.addEventListener("relaybus:list", (e) => {
    known.hosts = e.detail?.hosts ?? null;
    known.sessions = Array.isArray(e.detail?.sessions) ? e.detail.sessions : [];
  });
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
else start();
