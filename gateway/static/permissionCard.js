// A permission card: what exactly is being asked (label, whole command, warnings, diff; the
// questions Claude asks; a plan) and every answer the terminal offers: Approve, the CLI's own
// "always allow" rules, Reject with a reason, Reject and stop Claude, answers, Keep planning.

import { buildAnswers, codeSpans, OTHER_MAX_CHARS, pick, REASON_MAX_CHARS } from "./asks.js";
import { diffView, markdownNodes } from "./blockViews.js";
import { commandPreview } from "./commandPreview.js";
import { h, prettyJson } from "./dom.js";
import { toolLabel } from "./toolLabel.js";

/**
 * Fill `card` for permission `item`; every answer calls `onDecision(item, decision, extra)`
 * ("approve" | "reject", {answers?, suggestion?, reason?, interrupt?}). Read-only clients
 * and requests that cannot be answered from here (`answerable: false`) get no buttons.
 */
export function fillPermission(card, item, onDecision, readOnly = false) {
  const open = item.status === "pending" || item.status === "sending";
  const asking = item.questions?.length > 0;
  const isPlan = item.plan !== undefined;
  const canAnswer = open && !readOnly && item.answerable !== false;
  const busy = item.status === "sending";
  let title;
  if (asking) title = h("div", { class: "ptitle" }, h("b", {}, "Claude asks"));
  else if (isPlan) title = h("div", { class: "ptitle" }, h("b", {}, "Claude's plan: approve to start"));
  else title = h("div", { class: "ptitle" }, "Permission needed: ", h("b", {}, toolLabel(item.name, item.input)));
  // The whole command when the label cut or hid anything (several lines, too long,
  // hidden characters), with the warnings Claude Code's own prompt would give.
  const cmd = asking || isPlan ? null : commandPreview(item.name, item.input);
  const input = !asking && !isPlan && item.input && typeof item.input === "object" ? item.input : null;
  const parts = [
    title,
    open && item.answerable === false
      ? h("p", { class: "pnote", role: "note" }, item.answerableReason || "This can only be answered in the terminal.")
      : null,
    open && readOnly && item.answerable !== false
      ? h("p", { class: "pnote", role: "note" }, "This access token can watch but not answer.")
      : null,
    cmd?.warnings.length
      ? h("ul", { class: "pwarn", role: "alert" }, cmd.warnings.map((w) => h("li", {}, w)))
      : null,
    cmd?.full ? h("pre", { class: "pcommand", tabindex: "0" }, cmd.command) : null,
    item.edit && typeof item.edit === "object" ? diffView(item.edit) : null,
    isPlan ? h("div", { class: "plan md" }, item.plan.trim() ? markdownNodes(item.plan) : h("p", { class: "muted" }, "(The plan is empty.)")) : null,
    asking ? item.questions.map((q, i) => questionView(item, q, i, canAnswer && !busy)) : null,
    input ? h("details", { class: "input" }, h("summary", {}, "Input"), h("pre", {}, prettyJson(input))) : null,
  ];
  if (canAnswer) parts.push(...answerViews(item, onDecision, { asking, isPlan, busy }));
  else if (!open) parts.push(h("div", { class: `decision ${item.status}` }, item.statusText || item.status || "Resolved"));
  card.classList.toggle("ask", asking);
  card.classList.toggle("plancard", isPlan);
  card.replaceChildren(...parts.flat().filter(Boolean));
}

/** The buttons: main answers, the CLI's "always allow" rules, and the ways to say no. */
function answerViews(item, onDecision, { asking, isPlan, busy }) {
  const draft = item.draft;
  const note = h("textarea", {
    class: "preason",
    rows: 2,
    maxlength: REASON_MAX_CHARS,
    placeholder: isPlan ? "What should change? (optional, sent with Keep planning)" : "Reason for Claude (optional)",
    "aria-label": isPlan ? "Note for Claude" : "Reason for rejecting",
    disabled: busy,
  });
  note.value = draft.reason ?? "";
  note.addEventListener("input", () => {
    draft.reason = note.value;
  });
  const reject = (extra = {}) => onDecision(item, "reject", { reason: draft.reason ?? "", ...extra });
  const btn = (cls, text, onclick, disabled = busy) => h("button", { type: "button", class: cls, disabled, onclick }, text);
  if (isPlan) {
    return [
      h("div", { class: "actions" }, btn("approve", "Approve", () => onDecision(item, "approve")), btn("keep", "Keep planning", () => reject())),
      note,
      h("div", { class: "actions" }, btn("reject-stop", "Reject and stop Claude", () => reject({ interrupt: true }))),
    ];
  }
  const main = asking
    ? btn("approve", "Send answers", () => onDecision(item, "approve", { answers: buildAnswers(item.questions, draft.q).answers }), busy || !buildAnswers(item.questions, draft.q).complete)
    : btn("approve", "Approve", () => onDecision(item, "approve"));
  const always = (item.suggestions ?? []).map((s) =>
    btn("always", codeSpans(s.text).map((p) => (p.code ? h("code", {}, p.text) : p.text)), () =>
      onDecision(item, "approve", { suggestion: s.index }),
    ),
  );
  return [
    h("div", { class: "actions" }, main, btn("reject", "Reject", () => reject())),
    always.length ? h("div", { class: "always-list" }, always) : null,
    h(
      "details",
      { class: "pmore", open: Boolean(draft.reason) || undefined },
      h("summary", {}, "Reject with a reason, or stop Claude"),
      note,
      h("div", { class: "actions" }, btn("reject", "Reject with reason", () => reject()), btn("reject-stop", "Reject and stop Claude", () => reject({ interrupt: true }))),
    ),
  ].filter(Boolean);
}

/** One question: its options as radio buttons (or checkboxes) and an "Other" free answer. */
function questionView(item, q, i, enabled) {
  item.draft.q ??= {};
  const d = item.draft.q[q.question] ?? {};
  const type = q.multiSelect ? "checkbox" : "radio";
  const name = `${item.requestKey}-q${i}`;
  let fieldset = null;
  // Changes are applied in place (no redraw), so the text field keeps its focus.
  const set = (label, on, text) => {
    const next = pick(q, item.draft.q[q.question], label, on);
    if (text !== undefined) next.other = text;
    item.draft.q[q.question] = next;
    for (const box of fieldset.querySelectorAll("input[type=radio], input[type=checkbox]")) {
      box.checked = box.value === "" ? next.otherOn : !next.otherOn && next.picked.includes(box.value);
    }
    const send = fieldset.closest(".permission")?.querySelector("button.approve");
    if (send && item.status === "pending") send.disabled = !buildAnswers(item.questions, item.draft.q).complete;
  };
  const box = (value, checked, extra) =>
    h("input", { type, name, value, checked, disabled: !enabled, onchange: (e) => set(value || null, e.target.checked), ...extra });
  const options = q.options.map((o) =>
    h(
      "label",
      { class: "popt" },
      box(o.label, !d.otherOn && (d.picked ?? []).includes(o.label)),
      h("span", { class: "otext" }, h("span", { class: "olabel" }, o.label), o.description ? h("span", { class: "odesc" }, o.description) : null),
    ),
  );
  const other = h("input", {
    type: "text",
    class: "pother",
    maxlength: OTHER_MAX_CHARS,
    placeholder: "Type your own answer",
    "aria-label": `Other answer to: ${q.question}`,
    disabled: !enabled,
  });
  other.value = d.other ?? "";
  other.addEventListener("focus", () => set(null, true));
  other.addEventListener("input", () => set(null, true, other.value));
  fieldset = h(
    "fieldset",
    { class: "pq", disabled: !enabled },
    h("legend", {}, q.header ? h("span", { class: "qhead" }, q.header) : null, h("span", { class: "qtext" }, q.question)),
    q.multiSelect ? h("div", { class: "qhint muted" }, "Choose any, or answer in your own words") : null,
    options,
    h(
      "div",
      { class: "popt other" },
      box("", d.otherOn === true, { "aria-label": "Other" }),
      h("span", { class: "otext" }, h("span", { class: "olabel" }, "Other"), other),
    ),
  );
  return fieldset;
}
