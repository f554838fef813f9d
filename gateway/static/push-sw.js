// Push in the service worker (imported by sw.js): show what the gateway pushes, and act on
// the notification — Approve/Deny through the request's single-use capability, or open the
// session. Works on Android Chrome and on iOS 16.4+ for the app added to the home screen.

const scopeUrl = (path) => new URL(path, self.registration.scope).href;

async function showPush(msg) {
  if (msg.kind === "resolved") {
    // Update the request's notification in place, if this device still shows it.
    const open = await self.registration.getNotifications({ tag: msg.tag });
    if (!open.some((n) => n.data && n.data.requestKey === msg.requestKey)) return;
  }
  const options = {
    body: msg.body,
    tag: msg.tag,
    data: msg,
    icon: scopeUrl("icon-192.png"),
    badge: scopeUrl("icon-192.png"),
    renotify: msg.kind !== "resolved",
    silent: msg.kind === "resolved",
    requireInteraction: msg.kind === "approval",
  };
  // One-tap Approve/Deny only with the request's capability: a request the notification
  // cannot show whole (a flagged or long command, a question) opens the app on its card.
  if (msg.kind === "approval" && typeof msg.cap === "string" && Array.isArray(msg.actions)) {
    options.actions = msg.actions;
  }
  await self.registration.showNotification(msg.title, options);
}

self.addEventListener("push", (event) => {
  let msg = null;
  try {
    msg = event.data ? event.data.json() : null;
  } catch {
    msg = null;
  }
  if (!msg || typeof msg.title !== "string") return;
  event.waitUntil(showPush(msg));
});

async function decide(n, decision) {
  const d = n.data;
  const res = await fetch(scopeUrl("push/decide"), {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ cap: d.cap, decision }),
  }).catch(() => null);
  if (res && res.ok) return;
  // Over already (answered elsewhere, expired) or unreachable: say so where the person looks.
  await self.registration.showNotification(d.title, {
    body: res ? "Already answered or expired" : "Could not reach relaybus — open it to answer",
    tag: d.tag,
    data: { ...d, kind: "note", actions: undefined, cap: undefined },
    icon: scopeUrl("icon-192.png"),
  });
}

async function openSession(url) {
  const target = scopeUrl(url || "./");
  const wins = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  for (const w of wins) {
    if ("focus" in w) {
      await w.navigate(target).catch(() => null);
      return w.focus();
    }
  }
  return self.clients.openWindow(target);
}

self.addEventListener("notificationclick", (event) => {
  const n = event.notification;
  const d = n.data || {};
  n.close();
  if ((event.action === "approve" || event.action === "deny") && d.cap) {
    event.waitUntil(decide(n, event.action === "approve" ? "allow" : "deny"));
    return;
  }
  event.waitUntil(openSession(d.url));
});
