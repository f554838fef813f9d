// The session list: one row per session across every machine, newest activity first;
// each row says its state at a glance. Older sessions (quiet for a day, or whose history
// is loaded only when opened) come below the recent ones.

import { h } from "./dom.js";
import { promptLine, sessionState, sessionTitle, splitSessions } from "./sessionState.js";
import { formatAgo } from "./text.js";

const CWD_CHARS = 40;

/** Long paths keep their end, which names the project: "…/work/relaybus". */
function shortCwd(cwd) {
  const text = String(cwd ?? "");
  return text.length > CWD_CHARS ? `…${text.slice(-(CWD_CHARS - 1))}` : text;
}

function stateLabel(st) {
  if (st.kind === "idle") return h("span", { class: "sstate idle" }, st.text);
  const cls = `badge ${st.kind}${st.stale ? " stale" : ""}`;
  return h("span", { class: cls }, st.kind === "working" ? h("i", { class: "dot" }) : null, st.text);
}

function row(s, now, onOpen) {
  const st = sessionState(s, now);
  const prompt = s.title ? promptLine(s) : ""; // without a title the first prompt is the title
  return h(
    "li",
    { class: `srow ${st.kind}`, dataset: { sessionId: s.id, state: st.kind } },
    h(
      "a",
      { href: `#/s/${encodeURIComponent(s.id)}`, onclick: (e) => onOpen(e, s.id) },
      h("div", { class: "sline" }, h("span", { class: "stitle" }, sessionTitle(s)), stateLabel(st)),
      prompt ? h("div", { class: "sprompt" }, prompt) : null,
      st.detail ? h("div", { class: `sdetail ${st.kind}` }, st.detail) : null,
      h(
        "div",
        { class: "smeta" },
        s.host ? h("span", { class: "host" }, s.host) : null,
        h("span", { class: "cwd", title: s.cwd ?? "" }, shortCwd(s.cwd)),
      ),
      h(
        "div",
        { class: "sago" },
        formatAgo(Number(s.lastActivity) || Number(s.startedAt), now),
        s.historyLoaded === false ? h("span", { class: "snote" }, " · history loads when opened") : null,
      ),
    ),
  );
}

/** Replace the list's rows. `sessions` is already sorted; `emptyText` explains an empty list. */
export function renderList(ul, empty, sessions, now, onOpen, emptyText) {
  empty.hidden = sessions.length > 0;
  if (emptyText) empty.textContent = emptyText;
  const { recent, older } = splitSessions(sessions, now);
  const rows = recent.map((s) => row(s, now, onOpen));
  if (older.length) {
    rows.push(h("li", { class: "older-head", role: "heading", "aria-level": "2" }, "Older sessions"));
    rows.push(...older.map((s) => row(s, now, onOpen)));
  }
  ul.replaceChildren(...rows);
}
