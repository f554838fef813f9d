// Chat rendering: typed blocks -> DOM. Renders `blocks`; never reads `event.data` except
// through legacy.js when blocks are absent (the documented rollout fallback).

import { cutNote, markdownNodes, neutral, resultView } from "./blockViews.js";
import { h, prettyJson } from "./dom.js";
import { legacyBlocks } from "./legacy.js";
import { looksLikeMarkdown } from "./markdown.js";
import { interruptNotice, rejectionOf, rejectionText } from "./outcomes.js";
import { fillPermission } from "./permissionCard.js";
import { formatBytes } from "./text.js";
import { isAgentTool, toolLabel } from "./toolLabel.js";

const USER_TYPES = new Set(["user", "text", "message"]);
const KNOWN_TYPES = new Set([...USER_TYPES, "assistant", "tool_use", "tool_result", "thinking"]);
const TITLE_TYPES = new Set(["ai-title", "custom-title", "agent-name"]);

function alignOf(type) {
  if (USER_TYPES.has(type)) return "user";
  if (type === "assistant" || type === "tool_use" || type === "thinking") return "assistant";
  return "other";
}

/** Sub-agent work of a compaction (``acompact-*`` agents, or flagged by the server). */
function isCompaction(ev) {
  return ev?.compaction === true || (typeof ev?.agentId === "string" && ev.agentId.startsWith("acompact"));
}

export class ChatRenderer {
  /** @param {HTMLElement} list  @param {{onDecision: Function, readOnly?: () => boolean}} hooks */
  constructor(list, hooks) {
    this.list = list;
    this.hooks = hooks;
    this.reset();
  }

  reset() {
    this.list.replaceChildren();
    this.toolRows = new Map(); // toolUseId -> row element
    this.agentRows = []; // Task/Agent rows, in order: {row, toolUseId, key}
    this.groups = new Map(); // group key (agentId, or tool:<id>) -> {group, body, n}
    this.agentTools = new Map(); // agentId -> toolUseId (from the Task's tool_result)
    this.cards = new Map(); // requestKey -> permission card
    this.permsByTool = new Map(); // toolUseId -> permission item (who rejected it, and why)
  }

  renderAll(items) {
    this.reset();
    for (const item of items) this.append(item);
  }

  /** Drop DOM nodes of items below `minSeq` (the store trimmed them). */
  trim(minSeq) {
    for (const el of this.list.querySelectorAll("[data-seq]")) {
      if (Number(el.dataset.seq) < minSeq) el.remove();
    }
  }

  append(item) {
    let node = null;
    if (item.kind === "gap") node = this.gapNode(item);
    else if (item.kind === "permission") node = this.permissionNode(item);
    else node = this.eventNode(item);
    if (!node) return;
    const sidechain = item.kind === "event" && item.event?.sidechain === true;
    (sidechain ? this.groupFor(item.event) : this.list).append(node);
  }

  gapNode(item) {
    const g = item.gap;
    const range = g.fromSeqId && g.toSeqId ? ` (${g.fromSeqId}–${g.toSeqId})` : "";
    const why = g.reason ? `, reason: ${g.reason}` : "";
    return h(
      "div",
      { class: "gap", role: "status", dataset: { seq: item.seqId } },
      `Some events could not be delivered${range}${why}. The session was reloaded.`,
    );
  }

  eventNode(item) {
    const ev = item.event ?? {};
    const type = typeof ev.type === "string" ? ev.type : "unknown";
    if (TITLE_TYPES.has(type)) return null; // a session title, not a chat message
    if (ev.compactSummary === true || (type === "system" && ev.subtype === "compact_boundary")) {
      return this.compactedNode(item, ev);
    }
    const blocks = Array.isArray(ev.blocks) ? ev.blocks : legacyBlocks(ev);
    const wrap = h("div", { class: `item ${alignOf(type)}`, dataset: { seq: item.seqId, type } });
    if (!blocks || (!blocks.length && !KNOWN_TYPES.has(type))) {
      const label = KNOWN_TYPES.has(type) ? `(event type: ${type})` : `(unknown event type: ${type})`;
      wrap.append(neutral(label, ""));
      return wrap;
    }
    this.lastResultRow = null;
    for (const block of blocks) {
      const node = this.blockNode(block, alignOf(type));
      if (node) wrap.append(node);
      if (block?.kind !== "tool_result" && block?.kind !== "image" && block?.kind !== "document") {
        this.lastResultRow = null;
      }
    }
    this.lastResultRow = null;
    return wrap.childElementCount ? wrap : null;
  }

  /** Compaction: one collapsed row; the summary the model continues from inside it. */
  compactedNode(item, ev) {
    const blocks = Array.isArray(ev.blocks) ? ev.blocks : [];
    const text = blocks.filter((b) => b?.kind === "text").map((b) => String(b.text ?? "")).join("\n");
    const summary = ev.compactSummary === true;
    return h(
      "div",
      { class: "item other", dataset: { seq: item.seqId, type: ev.type } },
      h(
        "details",
        { class: "compacted" },
        h("summary", {}, summary ? "Conversation compacted · summary" : "Conversation compacted"),
        text.trim() ? h("div", { class: "ctext" }, text) : null,
      ),
    );
  }

  blockNode(block, align) {
    if (!block || typeof block !== "object") return neutral("(empty block)", "");
    switch (block.kind) {
      case "text": {
        const text = String(block.text ?? "");
        if (!text.trim()) return null;
        const interrupt = align === "user" ? interruptNotice(text) : null;
        if (interrupt) return h("div", { class: "interrupt", role: "note" }, interrupt);
        if (align === "assistant" && looksLikeMarkdown(text)) {
          return h("div", { class: `bubble ${align} md` }, markdownNodes(text), cutNote(block));
        }
        return h("div", { class: `bubble ${align}` }, text, cutNote(block));
      }
      case "thinking": {
        const text = String(block.text ?? "");
        return h(
          "details",
          { class: "thinking" },
          h("summary", {}, text ? "Thinking" : "Thinking (not recorded)"),
          text ? h("div", { class: "ttext" }, text, cutNote(block)) : null,
        );
      }
      case "tool":
        return this.toolRow(block);
      case "tool_result":
        return this.attachResult(block);
      case "image":
      case "document": {
        const what = block.kind === "image" ? "Image" : "Document";
        const ph = h(
          "div",
          { class: "image-ph" },
          `${what} · ${block.mediaType || "unknown type"} · ${formatBytes(block.bytes)}`,
        );
        // Media right after a tool result belongs to that result's row.
        if (this.lastResultRow) {
          this.lastResultRow.querySelector(":scope > .result")?.append(ph);
          return null;
        }
        return ph;
      }
      case "notification":
        return this.notice(block);
      default: {
        const text = block.text ?? block.label ?? block.name ?? "";
        return neutral(`(${String(block.kind ?? "unknown")} block)`, String(text));
      }
    }
  }

  notice(block) {
    const text = String(block.text ?? "");
    const summary = typeof block.summary === "string" && block.summary ? block.summary : "";
    const node = neutral(block.source ? `Notice · ${block.source}` : "Notice", summary || text);
    if (summary && text) node.append(h("details", {}, h("summary", {}, "Details"), h("pre", {}, text)));
    return node;
  }

  toolRow(block) {
    const name = typeof block.name === "string" ? block.name : "Tool";
    const row = h(
      "div",
      { class: "tool pending", dataset: { toolUseId: block.toolUseId ?? "", name } },
      h(
        "div",
        { class: "thead" },
        h("span", { class: "status", "aria-hidden": "true" }),
        h("span", { class: "label" }, toolLabel(name, block.input)),
      ),
      h(
        "details",
        { class: "input", open: true },
        h("summary", {}, "Input"),
        h("pre", {}, prettyJson(block.input ?? {})),
      ),
    );
    if (block.toolUseId) this.toolRows.set(block.toolUseId, row);
    if (isAgentTool(name)) this.agentRows.push({ row, toolUseId: block.toolUseId ?? null, key: null });
    return row;
  }

  attachResult(block) {
    const row = this.toolRows.get(block.toolUseId);
    const rejected = rejectionOf(block, this.permsByTool.get(block.toolUseId));
    const view = rejected
      ? h("div", { class: "result rejected" }, h("div", { class: "rej-label" }, rejectionText(rejected)))
      : resultView(block);
    const note = rejected ? null : cutNote(block);
    if (note) view.append(note);
    this.lastResultRow = row ?? null;
    if (!row) return h("div", { class: "tool orphan" }, h("div", { class: "thead" }, "Tool result"), view);
    row.querySelector(":scope > .result")?.remove();
    row.classList.remove("pending");
    row.classList.add(rejected ? "rejected" : block.isError ? "failed" : "done");
    const input = row.querySelector(":scope > details.input");
    if (input) input.open = false;
    if (typeof block.agentId === "string" && block.agentId) this.adoptAgent(block.agentId, block.toolUseId, row);
    const group = row.querySelector(":scope > .agent-group");
    row.insertBefore(view, group);
    if (group) group.open = false; // completed sub-agent work collapses, like a finished tool
    return null;
  }

  /** A Task's result names its agent: its group belongs under this row (moved if misplaced). */
  adoptAgent(agentId, toolUseId, row) {
    this.agentTools.set(agentId, toolUseId);
    const g = this.groups.get(agentId);
    const slot = this.agentRows.find((r) => r.row === row);
    if (!g) {
      if (slot && slot.key === null) slot.key = agentId; // reserved for its own work
      return;
    }
    if (g.group.parentElement === row) return;
    const prev = this.agentRows.find((r) => r.key === agentId);
    if (prev) prev.key = null;
    const holder = g.group.parentElement;
    if (slot) slot.key = agentId;
    row.append(g.group);
    if (holder && holder !== row && holder.classList.contains("item") && !holder.childElementCount) holder.remove();
  }

  /**
   * The group body a sidechain event goes in: under the Task row it belongs to by id
   * (`parentToolUseId` on the event, or the `agentId` a Task result named), else under the
   * first Task row still running (older servers give no ids). Compaction agents get a
   * collapsed group of their own.
   */
  groupFor(ev) {
    const agentId = typeof ev.agentId === "string" && ev.agentId ? ev.agentId : null;
    const parent = typeof ev.parentToolUseId === "string" && ev.parentToolUseId ? ev.parentToolUseId : null;
    const key = agentId ?? (parent ? `tool:${parent}` : "_");
    const known = this.groups.get(key);
    if (known) {
      known.n += 1;
      known.label.textContent = this.groupLabel(known);
      return known.body;
    }
    const compaction = isCompaction(ev);
    const toolUseId = parent ?? (agentId ? this.agentTools.get(agentId) : undefined);
    let slot = toolUseId ? this.agentRows.find((r) => r.toolUseId === toolUseId) : undefined;
    if (!slot && !compaction && !toolUseId) {
      const free = this.agentRows.filter((r) => r.key === null);
      slot = free.find((r) => r.row.classList.contains("pending")) ?? free.at(-1);
    }
    const body = h("div", { class: "agent-body" });
    const label = h("span", { class: "glabel" });
    const done = slot ? !slot.row.classList.contains("pending") : false;
    const group = h(
      "details",
      { class: `agent-group${compaction ? " compaction" : ""}`, open: !compaction && !done, dataset: { agentId: agentId ?? "" } },
      h("summary", {}, label),
      body,
    );
    const g = { group, body, label, n: 1, agentId, compaction };
    label.textContent = this.groupLabel(g);
    if (slot) {
      slot.key = key;
      slot.row.append(group);
    } else {
      this.list.append(h("div", { class: "item other" }, group));
    }
    this.groups.set(key, g);
    return body;
  }

  groupLabel(g) {
    const steps = `${g.n} ${g.n === 1 ? "step" : "steps"}`;
    if (g.compaction) return `Compacting the conversation · ${steps}`;
    return g.agentId ? `Sub-agent ${g.agentId.slice(0, 12)} · ${steps}` : `Sub-agent · ${steps}`;
  }

  permissionNode(item) {
    const card = h("div", { class: "permission", dataset: { seq: item.seqId, key: item.requestKey } });
    this.cards.set(item.requestKey, card);
    if (item.toolUseId) this.permsByTool.set(item.toolUseId, item);
    fillPermission(card, item, this.hooks.onDecision, this.readOnly());
    return card;
  }

  readOnly() {
    return this.hooks.readOnly?.() === true;
  }

  /** Re-render a permission card after a decision, resolution or expiry. */
  updatePermission(item) {
    const card = this.cards.get(item.requestKey);
    if (card) fillPermission(card, item, this.hooks.onDecision, this.readOnly());
  }
}
