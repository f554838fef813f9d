// Service worker: caches the app shell only (never messages, never /ws or API responses).
// Network first, so a new deploy takes effect at once; the cache is the offline fallback.

importScripts("push-sw.js");

const CACHE = "relaybus-shell-v7";
const SHELL = [
  "./",
  "index.html",
  "styles.css",
  "app.js",
  "actions.js",
  "asks.js",
  "blockViews.js",
  "chatView.js",
  "commandPreview.js",
  "commandRules.js",
  "connection.js",
  "controller.js",
  "diff.js",
  "dom.js",
  "errorWords.js",
  "ids.js",
  "indicator.js",
  "legacy.js",
  "listView.js",
  "markdown.js",
  "newConversation.js",
  "outcomes.js",
  "permissionCard.js",
  "permissionMode.js",
  "push-sw.js",
  "pushPrefs.js",
  "pushSettings.js",
  "render.js",
  "sessionState.js",
  "store.js",
  "text.js",
  "toolLabel.js",
  "manifest.webmanifest",
  "icon.svg",
  "icon-192.png",
  "icon-512.png",
];
const SHELL_URLS = new Set(SHELL.map((p) => new URL(p, self.registration.scope).href));

self.addEventListener("install", (event) => {
  event.waitUntil(caches.open(CACHE).then((c) => c.addAll(SHELL)).then(() => self.skipWaiting()));
});

self.addEventListener("activate", (event) => {
  event.waitUntil(
    caches
      .keys()
      .then((keys) => Promise.all(keys.filter((k) => k !== CACHE).map((k) => caches.delete(k))))
      .then(() => self.clients.claim()),
  );
});

self.addEventListener("fetch", (event) => {
  const req = event.request;
  if (req.method !== "GET") return;
  const url = new URL(req.url);
  url.search = ""; // ?token= links still map to the cached shell
  if (!SHELL_URLS.has(url.href)) return; // not shell: let the browser handle it
  event.respondWith(
    fetch(req)
      .then((res) => {
        if (res.ok) {
          const copy = res.clone();
          caches.open(CACHE).then((c) => c.put(url.href, copy));
        }
        return res;
      })
      .catch(() => caches.match(url.href).then((hit) => hit ?? Response.error())),
  );
});
