// What a session row and the header say at a glance, from SessionInfo / turn_status /
// session_updated and the sessions frame's `hosts`. Pure: unit-tested under node.

import { basename, formatElapsed, shorten } from "./text.js";

/** A working session with no new line for this long is shown as stale. */
export const STALE_MS = 5 * 60_000;
/** Sessions quiet for longer than this (and not live) go to "Older sessions". */
export const RECENT_MS = 24 * 3600_000;

const num = (v) => (Number.isFinite(Number(v)) ? Number(v) : 0);

/** Minutes or hours, short: "12 min", "3 h", "2 d". */
export function formatQuiet(ms) {
  const min = Math.max(1, Math.round(ms / 60_000));
  if (min < 60) return `${min} min`;
  const h = Math.round(min / 60);
  return h < 48 ? `${h} h` : `${Math.round(h / 24)} d`;
}

/**
 * The state of one session: {kind: "working"|"waiting"|"idle"|"ended", text, detail, stale}.
 * `text` is the short label; `detail` what the person needs (what it waits for, how stale).
 */
export function sessionState(s, now) {
  const since = num(s?.since);
  const activity = num(s?.lastActivity);
  if (s?.state === "waiting") {
    return { kind: "waiting", text: "waiting for you", detail: s.waitingFor ? String(s.waitingFor) : "", stale: false };
  }
  if (s?.state === "working") {
    const text = since ? `working ${formatElapsed(now - since)}` : "working";
    const quiet = activity ? now - Math.max(activity, since) : 0;
    const stale = quiet > STALE_MS;
    return { kind: "working", text, detail: stale ? `no output for ${formatQuiet(quiet)}` : "", stale };
  }
  if (s?.live === false || s?.ended === true) return { kind: "ended", text: "ended", detail: "", stale: false };
  return { kind: "idle", text: "idle", detail: "", stale: false };
}

/** True for a session shown under "Older sessions". */
export function isOlder(s, now) {
  if (s?.historyLoaded === false) return true;
  if (s?.live === true || s?.state === "working" || s?.state === "waiting") return false;
  const at = num(s?.lastActivity) || num(s?.startedAt);
  return at > 0 && now - at > RECENT_MS;
}

/** Split an activity-sorted list into recent and older sessions (order kept). */
export function splitSessions(sorted, now) {
  const recent = [];
  const older = [];
  for (const s of sorted) (isOlder(s, now) ? older : recent).push(s);
  return { recent, older };
}

/** Session title: its real title -> its first prompt (relaybus's additive field) -> cwd
 * basename -> first 8 chars of the id. */
export function sessionTitle(info) {
  const title = typeof info?.title === "string" ? info.title.trim() : "";
  if (title) return title;
  const first = typeof info?.firstPrompt === "string" ? info.firstPrompt.trim() : "";
  if (first) return first;
  const base = basename(info?.cwd ?? "");
  if (base) return base;
  return String(info?.id ?? "").slice(0, 8) || "session";
}

/** The open session's header: its real title -> cwd basename -> first 8 chars of the id
 * (the seed's order; the first prompt is in the chat right below). */
export function headerTitle(info) {
  const title = typeof info?.title === "string" ? info.title.trim() : "";
  return title || basename(info?.cwd ?? "") || String(info?.id ?? "").slice(0, 8) || "session";
}

/** The first prompt as a one-line subtitle ("" when absent). */
export function promptLine(s) {
  return typeof s?.firstPrompt === "string" && s.firstPrompt.trim() ? shorten(s.firstPrompt, 90) : "";
}

/** Distinct working directories of `host`'s sessions, most recent first. */
export function recentCwds(sorted, host, max = 8) {
  const out = [];
  for (const s of sorted) {
    if (s?.host !== host || typeof s.cwd !== "string" || !s.cwd || out.includes(s.cwd)) continue;
    out.push(s.cwd);
    if (out.length >= max) break;
  }
  return out;
}

/**
 * Whether a machine takes prompts: true / false, or null when the server does not say
 * (no `hosts` in the sessions frame: an older gateway; let the machine answer).
 */
export function promptsAllowed(hosts, host) {
  if (!Array.isArray(hosts)) return null;
  const h = hosts.find((x) => x?.host === host);
  if (!h) return false;
  return Array.isArray(h.capabilities) && h.capabilities.includes("prompts");
}

/** Why the message box is not shown for `host` ("" when it is). */
export function promptsOffText(hosts, host) {
  const allowed = promptsAllowed(hosts, host);
  if (allowed !== false) return "";
  const name = host || "this machine";
  if (!hosts.some((x) => x?.host === host)) {
    return `${name} is offline (its collector isn't running), so prompts can't be sent to it now.`;
  }
  return `Prompts are off on ${name}. To send prompts from here, restart its collector with RELAYBUS_ALLOW_PROMPTS=true (and optionally RELAYBUS_PROMPT_CWD_ALLOW=<dirs>).`;
}

/** What the empty list says: which machines are connected, or that none is. */
export function emptyText(hosts) {
  if (!Array.isArray(hosts)) return "No sessions yet. Start Claude Code on a machine running the collector.";
  if (!hosts.length) {
    return "No sessions, and no machine is connected: run `relaybus collector` (or `relaybus up`) where Claude Code runs.";
  }
  const names = hosts.map((x) => String(x.host)).join(", ");
  return `No sessions yet. Connected: ${names}; their collectors found no transcript with something to show. Start Claude Code there and it appears here.`;
}

/** Header text while (re)connecting or replaying missed events ("" when fresh). */
export function freshnessText(link) {
  if (link.state === "waiting") return `Connection lost. Reconnecting in ${formatElapsed(num(link.retryInMs) + 999)}…`;
  if (link.state === "connecting") return "Reconnecting…";
  if (link.catchingUp > 0) return `Catching up: ${link.catchingUp} ${link.catchingUp === 1 ? "event" : "events"}…`;
  return "";
}
