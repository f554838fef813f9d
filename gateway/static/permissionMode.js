// The open session's permission mode: a chip in its header, and for a client that may act a
// switch asking the session's machine to change it (`set_permission_mode`, docs/protocol.md:
// Shift+Tab in its tmux pane, or the next headless run's --permission-mode).

import { h } from "./dom.js";

/** Claude Code's permission modes (what it writes as `permissionMode`) in words. */
export const MODE_WORDS = Object.freeze({
  default: "Ask first",
  acceptEdits: "Accept edits",
  plan: "Plan",
  auto: "Auto",
  dontAsk: "Don't ask",
  bypassPermissions: "Bypass permissions",
});

/** What the switch offers: the CLI's own Shift+Tab cycle (other modes it cannot reach there). */
export const SWITCHABLE = Object.freeze(["default", "acceptEdits", "plan", "auto"]);

/** A mode in words; an unknown one (an open union) as the CLI wrote it. */
export function modeWords(mode) {
  if (typeof mode !== "string" || !mode) return "";
  return Object.hasOwn(MODE_WORDS, mode) ? MODE_WORDS[mode] : mode.slice(0, 40);
}

export class PermissionModeControl {
  /**
   * @param {HTMLElement} bar  the chat header the chip and the switch are appended to
   * @param {{request: (frame: object, meta: object) => boolean}} hooks  sends a tracked request
   */
  constructor(bar, hooks) {
    this.hooks = hooks;
    this.readOnly = false; // the server said `forbidden`: this token may not act
    this.info = null;
    this.chip = h("span", { id: "pmode", class: "pmode", title: "Claude Code's permission mode", hidden: true });
    this.select = h(
      "select",
      { id: "pmode-switch", class: "pmode", "aria-label": "Permission mode", hidden: true },
      SWITCHABLE.map((m) => h("option", { value: m }, MODE_WORDS[m])),
    );
    this.select.addEventListener("change", () => this.change());
    bar.append(this.chip, this.select);
  }

  /** Draw the session's mode; the switch only where the machine takes commands. */
  draw(info, canAct) {
    this.info = info;
    const mode = info?.permissionMode;
    const words = modeWords(mode);
    const switchable = canAct && !this.readOnly && Boolean(info?.id);
    this.select.hidden = !switchable;
    this.chip.hidden = switchable || !words;
    this.chip.textContent = words;
    this.chip.dataset.mode = typeof mode === "string" ? mode : "";
    if (switchable) {
      this.select.disabled = false;
      this.select.value = SWITCHABLE.includes(mode) ? mode : "";
    }
  }

  change() {
    const sid = this.info?.id;
    const mode = this.select.value;
    if (!sid || !SWITCHABLE.includes(mode) || mode === this.info?.permissionMode) return;
    this.select.disabled = true;
    const sent = this.hooks.request(
      { type: "set_permission_mode", sessionId: sid, mode },
      { kind: "permission_mode", onError: (msg) => this.refused(msg) },
    );
    if (!sent) this.draw(this.info, true);
  }

  /** The switch was refused: back to the mode the session has; gone for read-only tokens. */
  refused(msg) {
    if (msg?.code === "forbidden") this.readOnly = true;
    this.draw(this.info, true);
  }
}
