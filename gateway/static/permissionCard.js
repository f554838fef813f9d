// A permission card: what exactly is being approved (label, whole command, warnings, diff).

import { diffView } from "./blockViews.js";
import { commandPreview } from "./commandPreview.js";
import { h, prettyJson } from "./dom.js";
import { toolLabel } from "./toolLabel.js";

/** Fill `card` for permission `item`; Approve/Reject call `onDecision(item, decision)`. */
export function fillPermission(card, item, onDecision) {
  const open = item.status === "pending" || item.status === "sending";
  const buttons = open
    ? h(
        "div",
        { class: "actions" },
        h(
          "button",
          { class: "approve", disabled: item.status === "sending", onclick: () => onDecision(item, "approve") },
          "Approve",
        ),
        h(
          "button",
          { class: "reject", disabled: item.status === "sending", onclick: () => onDecision(item, "reject") },
          "Reject",
        ),
      )
    : h("div", { class: `decision ${item.status}` }, item.statusText || item.status || "Resolved");
  // The whole command when the label cut or hid anything (several lines, too long,
  // hidden characters), with the warnings Claude Code's own prompt would give.
  const cmd = commandPreview(item.name, item.input);
  const input = item.input && typeof item.input === "object" ? item.input : null;
  // replaceChildren() would insert a missing part as the text "null": filter them out.
  const parts = [
    h("div", { class: "ptitle" }, "Permission needed: ", h("b", {}, toolLabel(item.name, item.input))),
    cmd?.warnings.length
      ? h("ul", { class: "pwarn", role: "alert" }, cmd.warnings.map((w) => h("li", {}, w)))
      : null,
    cmd?.full ? h("pre", { class: "pcommand", tabindex: "0" }, cmd.command) : null,
    item.edit && typeof item.edit === "object" ? diffView(item.edit) : null,
    input ? h("details", { class: "input" }, h("summary", {}, "Input"), h("pre", {}, prettyJson(input))) : null,
    buttons,
  ];
  card.replaceChildren(...parts.filter(Boolean));
}
