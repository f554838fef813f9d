// The "New conversation" screen: pick a machine and a directory (recent working
// directories of that machine, or another path), type the first prompt. app.js sends
// `new_conversation`, watches the reserved id and sends the prompt once the watch is on.

import { h } from "./dom.js";
import { promptsAllowed, promptsOffText, recentCwds } from "./sessionState.js";

const OTHER = "\u0000other";

export class NewConversationView {
  /** @param {HTMLElement} root  @param {{onStart: (req: {host, cwd, text}) => boolean}} hooks */
  constructor(root, hooks) {
    this.root = root;
    this.hooks = hooks;
    this.form = root.querySelector("#nc-form");
    this.host = root.querySelector("#nc-host");
    this.hostNote = root.querySelector("#nc-host-note");
    this.cwd = root.querySelector("#nc-cwd");
    this.other = root.querySelector("#nc-cwd-other");
    this.prompt = root.querySelector("#nc-prompt");
    this.start = root.querySelector("#nc-start");
    this.sessions = [];
    this.hosts = null;
    this.host.addEventListener("change", () => this.fillCwds());
    this.cwd.addEventListener("change", () => {
      this.other.hidden = this.cwd.value !== OTHER;
      if (!this.other.hidden) this.other.focus();
    });
    this.form.addEventListener("submit", (e) => {
      e.preventDefault();
      const cwd = this.cwd.value === OTHER ? this.other.value.trim() : this.cwd.value;
      const text = this.prompt.value;
      if (!text.trim() || !this.host.value) return;
      if (this.hooks.onStart({ host: this.host.value, cwd, text })) this.busy(true);
    });
  }

  /** Machines that take prompts first; the others are listed but cannot be picked. */
  show(sessions, hosts) {
    this.sessions = sessions;
    this.hosts = hosts;
    this.root.hidden = false;
    this.busy(false);
    const names = Array.isArray(hosts) ? hosts.map((x) => String(x.host)) : [...new Set(sessions.map((s) => s.host).filter(Boolean))];
    const keep = this.host.value;
    const ordered = [...names].sort((a, b) => Number(promptsAllowed(hosts, b) !== false) - Number(promptsAllowed(hosts, a) !== false));
    this.host.replaceChildren(
      ...ordered.map((name) =>
        h(
          "option",
          { value: name, disabled: promptsAllowed(hosts, name) === false },
          promptsAllowed(hosts, name) === false ? `${name} (prompts off)` : name,
        ),
      ),
    );
    const usable = ordered.filter((n) => promptsAllowed(hosts, n) !== false);
    this.host.value = usable.includes(keep) ? keep : (usable[0] ?? "");
    this.start.disabled = !usable.length;
    const off = ordered.find((n) => promptsAllowed(hosts, n) === false);
    const note = !usable.length
      ? ordered.length
        ? promptsOffText(hosts, off)
        : "No machine is connected."
      : "";
    this.hostNote.hidden = !note;
    this.hostNote.textContent = note;
    this.fillCwds();
  }

  hide() {
    this.root.hidden = true;
  }

  fillCwds() {
    const cwds = recentCwds(this.sessions, this.host.value);
    this.cwd.replaceChildren(
      ...cwds.map((c) => h("option", { value: c }, c)),
      h("option", { value: OTHER }, cwds.length ? "Other directory…" : "A directory on that machine…"),
    );
    this.cwd.value = cwds[0] ?? OTHER;
    this.other.hidden = this.cwd.value !== OTHER;
  }

  busy(on) {
    this.start.disabled = on;
    this.start.textContent = on ? "Starting…" : "Start";
  }

  /** Forget the typed prompt once the conversation started. */
  reset() {
    this.prompt.value = "";
    this.other.value = "";
    this.busy(false);
  }
}
