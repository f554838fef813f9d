// In-memory client state: the session list and the open chat. Nothing is persisted.
// Chat items are kept sorted by seqId and deduplicated by seqId; at most MESSAGE_CAP.

export const MESSAGE_CAP = 500;
const ECHO_WINDOW_MS = 120_000;

/** One watched session's events (plus gap markers), capped and deduplicated. */
export class Chat {
  constructor(sessionId) {
    this.sessionId = sessionId;
    this.items = []; // {seqId, kind: "event"|"permission"|"gap", ...}
    this.seen = new Set();
    this.lastSeqId = 0; // highest session event seqId received (for sinceSeqId)
    this.pending = []; // optimistic prompt echoes {id, text, at, status, error}
    this.permissions = new Map(); // requestKey -> permission item
    this.watchHead = 0; // seqId of the watch_ack: session events above it are live
  }

  /**
   * Insert an item; returns {added, inOrder, trimmedBelow} where `inOrder` means it went
   * at the end and `trimmedBelow` is the smallest kept seqId when old items were dropped.
   */
  add(item) {
    if (!Number.isFinite(item.seqId)) {
      // No seqId (never sent by this server): keep it, after everything, undeduplicated.
      item.seqId = (this.items.at(-1)?.seqId ?? 0) + 1e-6;
      item.unsequenced = true;
    }
    if (this.seen.has(item.seqId)) return { added: false, inOrder: true, trimmedBelow: null };
    if (item.kind !== "gap" && !item.unsequenced) {
      this.seen.add(item.seqId);
      this.lastSeqId = Math.max(this.lastSeqId, item.seqId);
    }
    const last = this.items.at(-1);
    let inOrder = true;
    if (!last || last.seqId < item.seqId) {
      this.items.push(item);
    } else {
      inOrder = false;
      const at = this.items.findIndex((it) => it.seqId > item.seqId);
      this.items.splice(at < 0 ? this.items.length : at, 0, item);
    }
    let trimmedBelow = null;
    if (this.items.length > MESSAGE_CAP) {
      const dropped = this.items.splice(0, this.items.length - MESSAGE_CAP);
      for (const d of dropped) {
        if (d.kind === "permission") this.permissions.delete(d.requestKey);
      }
      trimmedBelow = this.items[0].seqId;
    }
    return { added: true, inOrder, trimmedBelow };
  }

  /** Drop everything (gap or epoch change) and leave one visible gap marker. */
  resetWithGap(gap) {
    this.items = [];
    this.seen.clear();
    this.permissions.clear();
    this.lastSeqId = 0;
    this.items.push({ kind: "gap", seqId: gap.reason === "epoch" ? -1 : gap.fromSeqId - 0.5, gap });
  }

  addPending(id, text, now) {
    const p = { id, text, at: now, status: "sending", error: null };
    this.pending.push(p);
    return p;
  }

  /** Remove the optimistic echo matching a user event's text; returns it or null. */
  matchEcho(text, now) {
    const want = text.trim();
    const idx = this.pending.findIndex(
      (p) => p.status !== "failed" && p.text.trim() === want && now - p.at < ECHO_WINDOW_MS,
    );
    return idx < 0 ? null : this.pending.splice(idx, 1)[0];
  }
}

/** The session list (across machines) plus connection-level resume state. */
export class Store {
  constructor() {
    this.sessions = new Map();
    this.chat = null; // the open session's Chat
    this.lastSeqId = 0; // highest broadcast-class seqId seen (hello.lastSeqId)
    this.epoch = null;
    this.listed = false; // a sessions snapshot has arrived
    this.interruptUnavailable = new Set(); // session ids whose Stop is disabled
    this.hosts = null; // the sessions frame's machines ({host, capabilities}); null: not told
    this.firstPrompt = null; // {sid, text}: sent once the new conversation's watch is on
    this.readOnly = false; // this token may watch but not act (welcome.readOnly, or a forbidden)
  }

  noteSeq(seqId) {
    if (Number.isFinite(seqId)) this.lastSeqId = Math.max(this.lastSeqId, seqId);
  }

  /** Replace the list from a `sessions` snapshot. */
  setSessions(list) {
    const next = new Map();
    for (const info of Array.isArray(list) ? list : []) {
      if (!info || typeof info.id !== "string") continue;
      next.set(info.id, { ...this.sessions.get(info.id), ...info });
    }
    this.sessions = next;
    this.listed = true;
  }

  /** What is known of session `id` (at least its id). */
  info(id) {
    return this.sessions.get(id) ?? { id };
  }

  upsert(id, patch) {
    const cur = this.sessions.get(id) ?? { id };
    const next = { ...cur };
    for (const [k, v] of Object.entries(patch)) if (v !== undefined) next[k] = v;
    this.sessions.set(id, next);
    return next;
  }

  /** A turn change; `lastActivity` stays the time of the last line (staleness reads it). */
  applyTurnStatus(msg) {
    return this.upsert(msg.sessionId, {
      state: msg.state,
      since: msg.since,
      waitingFor: msg.waitingFor ?? null,
    });
  }

  /** Sessions sorted by their latest sign of life (line, turn change, start), newest first. */
  sorted() {
    const key = (s) => Math.max(Number(s.lastActivity) || 0, Number(s.since) || 0, Number(s.startedAt) || 0);
    return [...this.sessions.values()].sort((a, b) => key(b) - key(a));
  }

  openChat(sessionId) {
    this.chat = new Chat(sessionId);
    return this.chat;
  }

  closeChat() {
    this.chat = null;
  }
}
