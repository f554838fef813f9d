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
