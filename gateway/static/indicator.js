// The working indicator: animated glyph, rotating verbs (pure presentation, our own words),
// elapsed time from `since`. Static glyph and verb when the OS asks for reduced motion.
// Any state other than working/waiting renders nothing. No client-side timeout: the
// server's idle turn_status is the only thing that ends "working".

import { h } from "./dom.js";
import { formatQuiet, STALE_MS } from "./sessionState.js";
import { formatElapsed } from "./text.js";

export const VERBS = [
  "Working",
  "Mulling it over",
  "Tinkering",
  "Untangling",
  "Brewing",
  "Piecing it together",
  "Chewing on it",
  "Sketching",
];
const VERB_MS = 2800;

function reducedMotion() {
  return window.matchMedia?.("(prefers-reduced-motion: reduce)").matches === true;
}

export class Indicator {
  /** @param {HTMLElement} el  container (hidden when idle) */
  constructor(el) {
    this.el = el;
    this.state = null;
    this.since = 0;
    this.waitingFor = null;
    this.timer = null;
    this.parts = null;
  }

  set(state, since, waitingFor, lastActivity) {
    this.state = state;
    this.since = Number(since) || Date.now();
    this.waitingFor = waitingFor ?? null;
    this.lastActivity = Number(lastActivity) || 0;
    clearInterval(this.timer);
    this.timer = null;
    if (state === "working" || state === "waiting") {
      this.draw();
      this.timer = setInterval(() => this.draw(), 1000);
    } else {
      this.el.hidden = true;
    }
  }

  clear() {
    this.set(null, 0, null);
  }

  draw() {
    const now = Date.now();
    const still = reducedMotion();
    this.el.hidden = false;
    this.el.className = `indicator ${this.state}${still ? " still" : ""}`;
    if (!this.parts) {
      this.parts = {
        glyph: h("span", { class: "glyph", "aria-hidden": "true" }),
        verb: h("span", { class: "verb" }),
        elapsed: h("span", { class: "elapsed" }),
        stale: h("span", { class: "stale" }),
      };
      this.el.replaceChildren(this.parts.glyph, this.parts.verb, this.parts.elapsed, this.parts.stale);
    }
    const { glyph, verb, elapsed, stale } = this.parts;
    elapsed.textContent = formatElapsed(now - this.since);
    const quiet = this.lastActivity ? now - Math.max(this.lastActivity, this.since) : 0;
    const isStale = this.state === "working" && quiet > STALE_MS;
    stale.hidden = !isStale;
    stale.textContent = isStale ? `no output for ${formatQuiet(quiet)}` : "";
    if (this.state === "waiting") {
      glyph.textContent = "◆";
      verb.textContent = this.waitingFor ? `Waiting: ${this.waitingFor}` : "Waiting for you";
      return;
    }
    const turn = Math.max(0, Math.floor((now - this.since) / VERB_MS));
    glyph.textContent = "✻";
    verb.textContent = `${still ? VERBS[0] : VERBS[turn % VERBS.length]}…`;
  }
}
