// The open session's screen: header, working indicator + Stop, messages, optimistic
// prompt echoes and the composer. State lives in store.js; this only draws it.

import { h } from "./dom.js";
import { Indicator } from "./indicator.js";
import { ChatRenderer } from "./render.js";
import { headerTitle, promptsOffText } from "./sessionState.js";

const STICK_PX = 80;

export class ChatView {
  /**
   * @param {{onStop: Function, onSend: Function, onDecision: Function, onDismiss: Function,
   *          readOnly: () => boolean}} hooks
   */
  constructor(root, hooks) {
    this.root = root;
    this.hooks = hooks;
    this.title = root.querySelector("#chat-title");
    this.sub = root.querySelector("#chat-sub");
    this.scroller = root.querySelector("#scroller");
    this.pendingEl = root.querySelector("#pending");
    this.stop = root.querySelector("#stop");
    this.form = root.querySelector("#composer");
    this.input = root.querySelector("#prompt");
    this.promptsOff = root.querySelector("#prompts-off");
    this.historyEl = root.querySelector("#history-note");
    this.promptsAllowed = true;
    this.indicator = new Indicator(root.querySelector("#indicator"));
    this.queue = []; // [item, trimmedBelow] waiting for the next frame
    this.full = null; // items to redraw from scratch at the next frame
    this.frame = 0;
    this.renderer = new ChatRenderer(root.querySelector("#messages"), {
      onDecision: (item, d, extra) => hooks.onDecision(item, d, extra),
      readOnly: () => hooks.readOnly(),
    });
    this.stop.addEventListener("click", () => hooks.onStop());
    this.form.addEventListener("submit", (e) => {
      e.preventDefault();
      const text = this.input.value;
      if (text.trim()) hooks.onSend(text);
    });
    this.input.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) this.form.requestSubmit();
    });
  }

  nearBottom() {
    const s = this.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight < STICK_PX;
  }

  /** Run a DOM change and keep the view pinned to the bottom if it was there. */
  keepPinned(change) {
    const pinned = this.nearBottom();
    change();
    if (pinned) this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  show(info) {
    this.root.hidden = false;
    this.header(info);
    cancelAnimationFrame(this.frame);
    this.frame = 0;
    this.queue = [];
    this.full = null;
    this.renderer.reset();
    this.pendingEl.replaceChildren();
    this.input.value = "";
    this.history("");
  }

  /** The message box only where the machine takes prompts; else how to turn them on. */
  access(info, hosts) {
    const off = info.host ? promptsOffText(hosts, info.host) : "";
    this.promptsAllowed = !off;
    this.form.hidden = Boolean(off);
    this.promptsOff.hidden = !off;
    this.promptsOff.textContent = off;
  }

  /** A status line above the messages (loading an old session's history, or why it failed). */
  history(text) {
    this.historyEl.hidden = !text;
    this.historyEl.textContent = text;
  }

  hide() {
    this.root.hidden = true;
    this.indicator.clear();
  }

  header(info) {
    this.title.textContent = headerTitle(info);
    const ended = info.live === false || info.ended ? " · ended" : "";
    this.sub.textContent = [info.host, info.cwd].filter(Boolean).join(" · ") + ended;
    document.title = `${headerTitle(info)} · relaybus`;
  }

  /** Working indicator and Stop button from the session's turn state. */
  turn(info, stopDisabled) {
    this.indicator.set(info.state, info.since, info.waitingFor, info.lastActivity);
    this.stop.hidden = info.state !== "working" || !this.promptsAllowed;
    this.stop.disabled = stopDisabled;
    this.stop.title = stopDisabled ? "Stopping isn't supported for this session" : "Stop this turn";
  }

  /** Redraw every item (out-of-order arrival, gap reset); `items` is the live store array. */
  renderAll(items) {
    this.queue = [];
    this.full = items;
    this.schedule();
  }

  /** Append one item (in seq order); a replay burst is drawn in one frame, one layout. */
  append(item, trimmedBelow) {
    if (!this.full) this.queue.push([item, trimmedBelow]);
    this.schedule();
  }

  schedule() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => this.flush());
  }

  flush() {
    this.frame = 0;
    const full = this.full;
    const queue = this.queue;
    this.full = null;
    this.queue = [];
    this.keepPinned(() => {
      if (full) this.renderer.renderAll(full);
      else {
        for (const [item, trimmedBelow] of queue) {
          this.renderer.append(item);
          if (trimmedBelow !== null) this.renderer.trim(trimmedBelow);
        }
      }
    });
  }

  updatePermission(item) {
    this.renderer.updatePermission(item);
  }

  /** Redraw the optimistic prompt echoes (few, so a full redraw is fine). */
  drawPending(pending) {
    this.keepPinned(() =>
      this.pendingEl.replaceChildren(
        ...pending.map((p) =>
          h(
            "div",
            { class: `item user echo ${p.status}`, dataset: { pendingId: p.id } },
            h("div", { class: "bubble user" }, p.text),
            h(
              "div",
              { class: "echo-status" },
              p.status === "failed" ? `Not sent: ${p.error}` : p.status === "sent" ? "Sent" : "Sending…",
              p.status === "failed"
                ? h("button", { class: "link", onclick: () => this.hooks.onDismiss(p) }, "Dismiss")
                : null,
            ),
          ),
        ),
      ),
    );
  }
}
