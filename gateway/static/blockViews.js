// Typed block pieces -> DOM: bubbles' Markdown, diffs, tool results, neutral rows, cut notes.

import { diffRows, formatEditDelta } from "./diff.js";
import { h } from "./dom.js";
import { parseMarkdown } from "./markdown.js";

/** "Shortened by the server" under a block the server cut (null when it is whole). */
export function cutNote(block) {
  if (block.truncated !== true) return null;
  const n = Number.isFinite(block.originalChars) ? ` of ${block.originalChars} characters` : "";
  return h("div", { class: "cut" }, `Shortened by the server (showing part${n}).`);
}

/** A coloured diff of edit hunks plus "Added N lines, removed M lines". */
export function diffView(edit) {
  const rows = diffRows(edit).map((r) =>
    h(
      "div",
      { class: `drow ${r.kind}` },
      h("span", { class: "ln" }, r.oldNo ?? ""),
      h("span", { class: "ln" }, r.newNo ?? ""),
      h("span", { class: "sign" }, { add: "+", del: "-", ctx: " ", hunk: "" }[r.kind]),
      h("span", { class: "code" }, r.text),
    ),
  );
  return h(
    "div",
    { class: "edit" },
    h("div", { class: "delta" }, formatEditDelta(edit)),
    rows.length ? h("div", { class: "diff" }, rows) : null,
    edit.truncated === true ? h("div", { class: "cut" }, "Diff shortened by the server.") : null,
  );
}

/** A tool result: its diff, error text or collapsed output. */
export function resultView(block) {
  const err = block.isError === true;
  const parts = [];
  if (block.edit && typeof block.edit === "object") parts.push(diffView(block.edit));
  const text = typeof block.text === "string" ? block.text : "";
  if (err) {
    parts.push(h("div", { class: "err-label" }, "Error"), h("pre", { class: "out" }, text));
  } else if (text) {
    const n = Number.isFinite(block.numLines) ? block.numLines : text.split("\n").length;
    parts.push(
      h(
        "details",
        { class: "output" },
        h("summary", {}, `Output · ${n} ${n === 1 ? "line" : "lines"}`),
        h("pre", { class: "out" }, text),
      ),
    );
  } else if (!parts.length) {
    parts.push(h("div", { class: "muted" }, "Done"));
  }
  return h("div", { class: `result${err ? " error" : ""}` }, parts);
}

function inlineNodes(inl) {
  return inl.map((n) => {
    if (n.t === "code") return h("code", {}, n.text);
    if (n.t === "strong") return h("strong", {}, inlineNodes(n.inl));
    if (n.t === "em") return h("em", {}, inlineNodes(n.inl));
    return n.text;
  });
}

/** The safe Markdown subset as DOM, built from text nodes only (markdown.js). */
export function markdownNodes(text) {
  return parseMarkdown(text).map((b) => {
    if (b.t === "code") return h("pre", { class: "code" }, b.text);
    if (b.t === "h") return h("p", { class: "mdh" }, h("strong", {}, inlineNodes(b.inl)));
    if (b.t === "ul" || b.t === "ol") {
      const attrs = b.t === "ol" && b.start !== 1 ? { start: b.start } : {};
      return h(b.t, attrs, b.items.map((inl) => h("li", {}, inlineNodes(inl))));
    }
    return h("p", {}, inlineNodes(b.inl));
  });
}

/** A grey row for blocks and events this client has no view of. */
export function neutral(label, text) {
  return h(
    "div",
    { class: "neutral" },
    h("span", { class: "tag" }, label),
    text ? h("span", { class: "ntext" }, text) : null,
  );
}
