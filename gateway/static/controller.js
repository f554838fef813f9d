// The client's protocol state: hello and resume, welcome, gaps, the session list, the open
// chat's watch and events. No DOM: it tells a View what changed (app.js draws it).

import { Actions } from "./actions.js";
import { newId } from "./ids.js";
import { Store } from "./store.js";

// blocks_only: the server leaves out event.data, which this client never reads when blocks
// are present (render doctrine), saving most of the bytes on a phone.
export const CAPABILITIES = ["session_subscriptions", "turn_status_observe", "blocks_only"];
const USER_TYPES = new Set(["user", "text", "message"]);
const LIST_ID = /^l-/; // requestIds of list_sessions (listRequest)
const LIST_RETRY_MS = 3000;

/** The epoch of an epoch token: `<epoch>` or `<epoch>.<rewind generation>` (protocol.md). */
function epochOf(token) {
  return typeof token === "string" ? token.replace(/\.\d+$/, "") : token;
}

/**
 * What the controller tells the screen; app.js implements every method.
 * @typedef {object} View
 * @property {(snapshot: boolean) => void} list  rows changed; `snapshot`: a `sessions` frame
 * @property {(info: object) => void} header  the open chat's session info changed
 * @property {() => void} turn  the open chat's turn state or prompt access changed
 * @property {(text: string) => void} history  the open chat's history note ("" for none)
 * @property {(item: object, trimmedBelow: number|null) => void} append  a chat item, in order
 * @property {(items: object[]) => void} renderAll  redraw every chat item
 * @property {(pending: object[]) => void} pending  the optimistic prompt echoes
 * @property {(item: object) => void} permission  a permission card's status changed
 * @property {(fresh: {state: string, retryInMs: number, catchingUp: number, first: boolean}) => void} freshness
 * @property {(text: string) => void} toast
 * @property {(message: string) => void} signin  the token is missing or refused
 * @property {(res: {sessionId?: string, error?: string}) => void} started  new_conversation answered
 * @property {(retryInMs: number) => void} unavailable  the gateway cannot reach its storage
 *           (Redis) and no session list has arrived: say so instead of "Loading sessions…"
 */

export class Controller {
  /**
   * @param {{conn: {send: (f: object) => boolean, stop: () => void, markHealthy: () => void},
   *          view: View, token: () => string, now?: () => number}} deps
   */
  constructor({ conn, view, token, now = Date.now }) {
    this.conn = conn;
    this.view = view;
    this.token = token;
    this.now = now;
    this.store = new Store();
    this.actions = new Actions({ store: this.store, conn, view, now });
    this.link = { welcomed: false, resumed: false, gapReset: false }; // per connection
    this.fresh = { state: "connecting", retryInMs: 0, catchingUp: 0 }; // what the header says
    this.listRetry = undefined; // the timer asking for the list again after "unavailable"
  }

  // ---- connection ------------------------------------------------------------------------

  /** The hello of a new connection: a resume (lastSeqId + epoch) after the first welcome. */
  hello() {
    const frame = { type: "hello", capabilities: CAPABILITIES };
    if (this.token()) frame.token = this.token();
    this.link = { welcomed: false, resumed: false, gapReset: false };
    if (this.store.epoch) {
      frame.epoch = this.store.epoch;
      frame.lastSeqId = this.store.lastSeqId;
      this.link.resumed = true;
    }
    return frame;
  }

  /** Frames sent right behind hello (the server answers them after welcome). */
  afterHello() {
    return [this.listRequest()];
  }

  listRequest() {
    return { type: "list_sessions", requestId: newId("l") };
  }

  unauthorizedText() {
    return this.token() ? "That token was not accepted." : "This server needs a token.";
  }

  /** The connection's state changed ({state: connecting|open|waiting|unauthorized, retryInMs}). */
  status(s) {
    if (s.state === "unauthorized") {
      this.view.signin(this.unauthorizedText());
      return;
    }
    Object.assign(this.fresh, { state: s.state, retryInMs: s.retryInMs ?? 0 });
    if (s.state !== "open") this.fresh.catchingUp = 0;
    this.drawFreshness();
  }

  drawFreshness() {
    // The very first connect is the loading screen's job, not a "reconnecting" banner.
    this.view.freshness({ ...this.fresh, first: !this.store.epoch });
  }

  // ---- protocol handlers -----------------------------------------------------------------

  /** One server frame (an open union: unknown types are ignored). */
  handle(msg) {
    const store = this.store;
    switch (msg.type) {
      case "welcome":
        return this.onWelcome(msg);
      case "sessions":
        store.setSessions(msg.sessions);
        store.hosts = Array.isArray(msg.hosts) ? msg.hosts : null;
        store.noteSeq(msg.seqId);
        if (this.fresh.catchingUp) {
          this.fresh.catchingUp = 0; // the resume replay was sent before this answer
          this.drawFreshness();
        }
        this.view.list(true);
        if (store.chat) this.view.header(store.info(store.chat.sessionId));
        return this.view.turn();
      case "session_started":
        store.noteSeq(msg.seqId);
        store.upsert(msg.sessionId, {
          cwd: msg.cwd,
          entrypoint: msg.entrypoint,
          host: msg.host,
          title: msg.title || undefined,
          firstPrompt: msg.firstPrompt || undefined,
          permissionMode: msg.permissionMode || undefined,
          startedAt: msg.startedAt,
          lastActivity:
            Math.max(Number(store.info(msg.sessionId).lastActivity) || 0, Number(msg.startedAt) || 0) || undefined,
          live: true,
        });
        if (store.chat?.sessionId === msg.sessionId) this.view.header(store.info(msg.sessionId));
        return this.view.list(false);
      case "session_ended":
        store.noteSeq(msg.seqId);
        store.upsert(msg.sessionId, { live: false });
        this.view.list(false);
        if (store.chat?.sessionId === msg.sessionId) this.view.header(store.info(msg.sessionId));
        return undefined;
      case "session_updated": // the session's SessionInfo changed (title, cwd, state, live…)
        return this.onSessionUpdated(msg);
      case "watch_ack":
        return this.onWatchAck(msg);
      case "new_conversation_ack":
        return this.actions.onNewConversation(msg);
      case "turn_status":
        store.noteSeq(msg.seqId);
        store.applyTurnStatus(msg);
        this.view.list(false);
        if (store.chat?.sessionId === msg.sessionId) this.view.turn();
        return undefined;
      case "session_event":
        return this.onSessionEvent(msg);
      case "permission_request":
        return this.actions.onPermission(msg);
      case "permission_resolved":
        return this.actions.onResolved(msg);
      case "gap_detected":
        return this.onGap(msg);
      case "prompt_sent":
        return this.actions.onPromptSent(msg);
      case "interrupt_ack":
        return this.actions.onInterruptAck(msg);
      case "error":
        if (msg.code === "unavailable" && !store.listed && LIST_ID.test(msg.requestId ?? "")) {
          return this.listUnavailable();
        }
        if (msg.code !== "unauthorized") return this.actions.onError(msg);
        this.conn.stop();
        return this.view.signin(this.unauthorizedText());
      default:
        this.actions.take(msg.requestId); // acks we need nothing from
        return undefined;
    }
  }

  onWelcome(msg) {
    const store = this.store;
    this.conn.markHealthy();
    const epochChanged = store.epoch !== null && epochOf(msg.epoch) !== epochOf(store.epoch);
    if (this.link.resumed && !epochChanged && Number(msg.seqId) > store.lastSeqId) {
      this.fresh.catchingUp = Number(msg.seqId) - store.lastSeqId; // replayed before our list answer
      this.drawFreshness();
    }
    store.epoch = msg.epoch ?? null;
    if (typeof msg.readOnly === "boolean" && msg.readOnly !== store.readOnly) {
      store.readOnly = msg.readOnly; // a read-only token gets no answer buttons
      if (store.chat) this.view.renderAll(store.chat.items);
    }
    if (epochChanged) {
      store.lastSeqId = 0;
      if (store.chat && !this.link.gapReset) this.resetChat({ reason: "epoch" });
    }
    if (!this.link.resumed || epochChanged) store.noteSeq(msg.seqId);
    this.link.welcomed = true;
    if (store.chat) this.watch(store.chat.sessionId, store.chat.lastSeqId);
  }

  /** Drop the open chat's items behind one gap marker; it is reloaded by a new watch. */
  resetChat(gap) {
    const chat = this.store.chat;
    chat.resetWithGap(gap);
    this.link.gapReset = true;
    this.view.renderAll(chat.items);
  }

  onGap(msg) {
    const chat = this.store.chat;
    if (msg.sessionId && chat?.sessionId !== msg.sessionId) return;
    if (!msg.sessionId && typeof msg.epoch === "string") this.store.epoch = msg.epoch;
    if (!msg.sessionId && msg.reason === "epoch") this.store.lastSeqId = 0;
    if (!msg.sessionId && msg.reason === "rewound") {
      // What we hold from fromSeqId on is void; the log's entries from there follow.
      this.store.lastSeqId = Math.min(this.store.lastSeqId, Number(msg.fromSeqId) - 1);
    }
    if (!chat) return;
    // Already reloaded on this connection (a rewound voids that reload too).
    if (!msg.sessionId && this.link.gapReset && msg.reason !== "rewound") return;
    this.resetChat(msg);
    if (this.link.welcomed) this.watch(chat.sessionId, 0);
  }

  onSessionUpdated(msg) {
    const info = msg.session;
    const sid = typeof msg.sessionId === "string" ? msg.sessionId : info?.id;
    if (!info || typeof info !== "object" || typeof sid !== "string") return;
    this.store.noteSeq(msg.seqId);
    this.store.upsert(sid, { ...info, id: sid });
    this.view.list(false);
    if (this.store.chat?.sessionId === sid) {
      this.view.header(this.store.info(sid));
      this.view.turn();
    }
  }

  onWatchAck(msg) {
    const store = this.store;
    this.actions.take(msg.requestId);
    const chat = store.chat;
    if (!chat || msg.sessionId !== chat.sessionId || msg.watching !== true) return;
    chat.watchHead = Number(msg.seqId) || 0; // session events above it are live
    const info = store.info(chat.sessionId);
    if (msg.historyLoaded !== false && info.historyLoaded === false) {
      store.upsert(chat.sessionId, { historyLoaded: true }); // published now: a recent session
    }
    const host = info.host;
    this.view.history(
      msg.historyLoaded === false
        ? `This session's history could not be loaded${host ? ` (${host} is offline or too old)` : ""}; new events will appear here.`
        : "",
    );
    const first = store.firstPrompt;
    if (first?.sid === chat.sessionId) {
      store.firstPrompt = null;
      this.actions.sendPrompt(first.text);
    }
  }

  onSessionEvent(msg) {
    const store = this.store;
    const chat = store.chat;
    if (!chat || msg.sessionId !== chat.sessionId) return;
    const ev = msg.event && typeof msg.event === "object" ? msg.event : { type: "unknown" };
    if (ev.type === "ai-title" && typeof ev.title === "string" && ev.title.trim()) {
      store.upsert(chat.sessionId, { title: ev.title });
      this.view.header(store.info(chat.sessionId));
      this.view.list(false);
    }
    const item = { kind: "event", seqId: msg.seqId, event: ev };
    const res = chat.add(item);
    if (!res.added) return;
    if (chat.watchHead && msg.seqId > chat.watchHead && !ev.sidechain) {
      store.upsert(chat.sessionId, { lastActivity: this.now() }); // a live line: not stale
      this.view.turn();
    }
    if (USER_TYPES.has(ev.type) && Array.isArray(ev.blocks) && !ev.sidechain) {
      const texts = ev.blocks.filter((b) => b?.kind === "text").map((b) => String(b.text ?? ""));
      const now = this.now();
      const echo = chat.matchEcho(texts.join("\n"), now) ?? texts.map((t) => chat.matchEcho(t, now)).find(Boolean);
      if (echo) this.view.pending(chat.pending);
    }
    if (res.inOrder) this.view.append(item, res.trimmedBelow);
    else this.view.renderAll(chat.items);
  }

  // ---- navigation ------------------------------------------------------------------------

  /** Watch `sid`, replaying its events above `sinceSeqId` (0: its whole recent history). */
  watch(sid, sinceSeqId) {
    const frame = { type: "watch_session", requestId: newId("w"), traceId: newId("t"), sessionId: sid };
    if (sinceSeqId > 0) frame.sinceSeqId = sinceSeqId;
    this.actions.track(frame.requestId, { kind: "watch", sid });
    this.conn.send(frame);
  }

  /** Leave the open chat unless it is `sid`; returns the session id left, or null. */
  leaveUnless(sid) {
    const cur = this.store.chat?.sessionId ?? null;
    if (!cur || cur === sid) return null;
    this.conn.send({ type: "unwatch_session", requestId: newId("u"), sessionId: cur });
    this.store.closeChat();
    return cur;
  }

  /** The first list failed (Redis down behind the gateway): say so, ask again later. */
  listUnavailable() {
    this.view.unavailable(LIST_RETRY_MS);
    clearTimeout(this.listRetry);
    this.listRetry = setTimeout(() => {
      if (!this.store.listed) this.refreshList();
    }, LIST_RETRY_MS);
  }

  /** Titles of unwatched sessions are not broadcast: ask for the list again. */
  refreshList() {
    if (this.link.welcomed) this.conn.send(this.listRequest());
  }

  /** Open `sid`'s chat and watch it; false when it is already open. */
  open(sid) {
    if (this.store.chat?.sessionId === sid) return false;
    this.store.openChat(sid);
    if (this.link.welcomed) this.watch(sid, 0);
    return true;
  }
}
