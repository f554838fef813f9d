// Pure: the Notifications sheet's choices — known machines as toggles, muted sessions by
// title — from what the session list knows and what the device's prefs hold.

import { sessionTitle } from "./sessionState.js";

const MAX_ROWS = 50;

/** Machine names to offer: connected ones, those of listed sessions and those already picked. */
export function knownMachines(hosts, sessions, picked) {
  const names = [
    ...(Array.isArray(hosts) ? hosts.map((x) => x?.host) : []),
    ...(Array.isArray(sessions) ? sessions.map((s) => s?.host) : []),
    ...(Array.isArray(picked) ? picked : []),
  ];
  return [...new Set(names.filter((n) => typeof n === "string" && n))].sort().slice(0, MAX_ROWS);
}

/** The muted sessions as [{id, title}] (a session no longer listed keeps its id prefix). */
export function mutedRows(muted, sessions) {
  const byId = new Map((Array.isArray(sessions) ? sessions : []).map((s) => [s?.id, s]));
  return (Array.isArray(muted) ? muted : [])
    .filter((id) => typeof id === "string" && id)
    .slice(0, MAX_ROWS)
    .map((id) => ({ id, title: sessionTitle(byId.get(id) ?? { id }) }));
}

/**
 * Why this page cannot turn push on, most basic cause first, or null when nothing is missing.
 * `env`: {secure, serviceWorker, pushManager, notification, permission, ios, standalone,
 * serverKey} as the page sees them (serverKey: false when GET push/key failed).
 */
export function pushBlocker(env) {
  if (!env.secure) {
    return (
      "Push needs HTTPS, and this page is plain http. Open the https:// address relaybus up prints " +
      "(relaybus url) — first install this machine's root certificate once from the page relaybus " +
      "url --root names (port 8081)."
    );
  }
  if (env.ios && !env.standalone && !env.pushManager) {
    return "On iPhone and iPad push works from the Home Screen app: Share → Add to Home Screen, then open relaybus from there.";
  }
  if (!env.serviceWorker) {
    return "This browser runs no service worker for this page (a private window, or service workers are off), so it cannot receive push.";
  }
  if (!env.pushManager || !env.notification) return "This browser has no Web Push support.";
  if (env.permission === "denied") {
    return "Notifications are blocked for this site: allow them in the browser's site settings, then try again.";
  }
  if (env.serverKey === false) {
    return "The server offers no push key (VAPID): push is off on the gateway (RELAYBUS_PUSH_ENABLED) or its Redis is unavailable.";
  }
  return null;
}
