// The session list: one row per session across every machine, newest activity first.

import { h } from "./dom.js";
import { formatAgo, sessionTitle } from "./toolDisplay.js";

const CWD_CHARS = 40;

/** Long paths keep their end, which names the project: "…/work/relaybus". */
function shortCwd(cwd) {
  const text = String(cwd ?? "");
  return text.length > CWD_CHARS ? `…${text.slice(-(CWD_CHARS - 1))}` : text;
}

function badge(s) {
  if (s.state === "working") return h("span", { class: "badge working" }, h("i", { class: "dot" }), "working");
  if (s.state === "waiting") return h("span", { class: "badge waiting" }, "waiting");
  if (s.live === false || s.ended) return h("span", { class: "badge ended" }, "ended");
  return null;
}

/** Replace the list's rows. `sessions` is already sorted. */
export function renderList(ul, empty, sessions, now, onOpen) {
  empty.hidden = sessions.length > 0;
  ul.replaceChildren(
    ...sessions.map((s) =>
      h(
        "li",
        { class: "srow", dataset: { sessionId: s.id } },
        h(
          "a",
          { href: `#/s/${encodeURIComponent(s.id)}`, onclick: (e) => onOpen(e, s.id) },
          h("div", { class: "sline" }, h("span", { class: "stitle" }, sessionTitle(s)), badge(s)),
          h(
            "div",
            { class: "smeta" },
            s.host ? h("span", { class: "host" }, s.host) : null,
            h("span", { class: "cwd", title: s.cwd ?? "" }, shortCwd(s.cwd)),
          ),
          h("div", { class: "sago" }, formatAgo(Number(s.lastActivity) || Number(s.startedAt), now)),
        ),
      ),
    ),
  );
}
