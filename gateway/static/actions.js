// What a person does to a session (prompt, Stop, Approve/Reject, new conversation) and the
// server's answers to it, with the requests still awaiting one. No DOM: it tells the view.

import { questionsOf, REASON_MAX_CHARS, suggestionsOf } from "./asks.js";
import { errorText } from "./errorWords.js";
import { newId } from "./ids.js";

const DECISION_WORDS = {
  approve: "Approved",
  approved: "Approved",
  allow: "Approved",
  accept: "Approved",
  reject: "Rejected",
  rejected: "Rejected",
  deny: "Rejected",
  expired: "Expired",
  timeout: "Expired: answer it in the terminal",
  no_decision: "No decision: answer it in the terminal",
  cancelled: "Cancelled",
  answered_elsewhere: "Answered in the terminal",
};

/** What a card says once decided: the exact answer this client sent, else the decision. */
function decisionText(item, decision) {
  const sent = item.sent;
  const allowed = DECISION_WORDS[decision] === "Approved";
  const denied = DECISION_WORDS[decision] === "Rejected";
  if (item.questions?.length && allowed) return "Answered";
  if (allowed && Number.isInteger(sent?.suggestion)) return "Approved · always allowed";
  if (item.plan !== undefined && allowed) return "Plan approved";
  if (item.plan !== undefined && denied) return "Kept planning";
  if (sent?.interrupt && denied) return "Rejected · Claude stopped";
  return DECISION_WORDS[decision] ?? `Resolved: ${decision ?? "unknown"}`;
}

/** " by dana · iPhone · 14:02" from `permission_resolved.decidedBy`; "" when absent or malformed. */
export function decidedByText(by) {
  if (!by || typeof by.member !== "string" || typeof by.device !== "string") return "";
  const parts = [by.member.slice(0, 64), by.device.slice(0, 64)];
  if (Number.isInteger(by.at)) {
    const at = new Date(by.at);
    parts.push(`${String(at.getHours()).padStart(2, "0")}:${String(at.getMinutes()).padStart(2, "0")}`);
  }
  return ` by ${parts.join(" · ")}`;
}

export class Actions {
  /**
   * @param {{store: import("./store.js").Store, conn: {send: (f: object) => boolean},
   *          view: import("./controller.js").View, now: () => number}} deps
   */
  constructor({ store, conn, view, now }) {
    this.store = store;
    this.conn = conn;
    this.view = view;
    this.now = now;
    this.requests = new Map(); // requestId -> {kind, ...}
  }

  /** Remember a request so its answer (or error) can be routed back. */
  track(requestId, meta) {
    this.requests.set(requestId, meta);
  }

  take(requestId) {
    const req = requestId ? this.requests.get(requestId) : undefined;
    if (requestId) this.requests.delete(requestId);
    return req;
  }

  /** Send a tracked request; false (and a toast) when offline. */
  request(frame, meta) {
    const requestId = newId(frame.type.slice(0, 3));
    const ok = this.conn.send({ ...frame, requestId, traceId: newId("t") });
    if (ok) this.track(requestId, meta);
    else this.view.toast("You're offline; try again when the connection is back.");
    return ok;
  }

  // ---- prompt with optimistic echo --------------------------------------------------

  sendPrompt(text) {
    const chat = this.store.chat;
    if (!chat) return;
    const requestId = newId("p");
    const p = chat.addPending(requestId, text, this.now());
    const frame = { type: "prompt", requestId, traceId: newId("t"), sessionId: chat.sessionId, message: text };
    if (this.conn.send(frame)) this.track(requestId, { kind: "prompt", pending: p });
    else Object.assign(p, { status: "failed", error: "You're offline." });
    this.view.pending(chat.pending);
  }

  /** Forget a failed echo the person dismissed. */
  dismiss(p) {
    const chat = this.store.chat;
    if (!chat) return;
    chat.pending = chat.pending.filter((x) => x !== p);
    this.view.pending(chat.pending);
  }

  onPromptSent(msg) {
    const req = this.take(msg.requestId);
    if (req?.kind !== "prompt" || req.pending.status !== "sending") return;
    req.pending.status = "sent";
    if (this.store.chat) this.view.pending(this.store.chat.pending);
  }

  // ---- Stop -----------------------------------------------------------------------------

  stopTurn() {
    const chat = this.store.chat;
    if (!chat) return;
    this.request({ type: "interrupt_request", sessionId: chat.sessionId }, { kind: "interrupt", sid: chat.sessionId });
  }

  onInterruptAck(msg) {
    const req = this.take(msg.requestId);
    if (msg.ok) {
      this.view.toast("Stop requested.");
      return;
    }
    if (msg.errorCode === "interrupt_unavailable") {
      this.store.interruptUnavailable.add(req?.sid ?? msg.sessionId ?? this.store.chat?.sessionId);
      this.view.turn();
    }
    this.view.toast(errorText(msg.errorCode, msg.message));
  }

  // ---- new conversation -------------------------------------------------------------------

  /** Ask `host` to start a conversation in `cwd`; `text` is sent once it is watched. */
  startConversation({ host, cwd, text }) {
    const frame = { type: "new_conversation", host };
    if (cwd) frame.cwd = cwd;
    return this.request(frame, { kind: "newconv", text });
  }

  /** The answer to new_conversation: the new session is listed and its first prompt kept. */
  onNewConversation(msg) {
    const req = this.take(msg.requestId);
    if (!msg.ok || typeof msg.sessionId !== "string") {
      this.view.started({ error: errorText(msg.errorCode, msg.message) });
      return;
    }
    const now = this.now();
    this.store.upsert(msg.sessionId, {
      id: msg.sessionId,
      host: msg.host,
      cwd: msg.cwd,
      firstPrompt: req?.text,
      startedAt: now,
      lastActivity: now,
      live: true,
    });
    if (req?.text) this.store.firstPrompt = { sid: msg.sessionId, text: req.text };
    this.view.started({ sessionId: msg.sessionId });
  }

  // ---- approvals ------------------------------------------------------------------------

  onPermission(msg) {
    const chat = this.store.chat;
    if (!chat || msg.sessionId !== chat.sessionId || !msg.requestKey) return;
    if (chat.permissions.has(msg.requestKey)) return;
    const expired = Number(msg.expiresAt) > 0 && msg.expiresAt < this.now();
    const item = {
      kind: "permission",
      seqId: msg.seqId,
      requestKey: msg.requestKey,
      toolUseId: msg.toolUseId,
      name: msg.name,
      input: msg.input,
      edit: msg.edit,
      questions: questionsOf(msg),
      suggestions: suggestionsOf(msg),
      plan: typeof msg.plan === "string" ? msg.plan : undefined,
      answerable: msg.answerable !== false,
      answerableReason: typeof msg.answerableReason === "string" ? msg.answerableReason : "",
      expiresAt: msg.expiresAt,
      status: expired ? "expired" : "pending",
      statusText: "Expired",
      draft: {}, // the card's unsent choices and note, kept across redraws
    };
    const res = chat.add(item);
    if (!res.added) return;
    chat.permissions.set(msg.requestKey, item);
    if (res.inOrder) this.view.append(item, res.trimmedBelow);
    else this.view.renderAll(chat.items);
  }

  onResolved(msg) {
    const item = this.store.chat?.permissions.get(msg.requestKey);
    if (!item) return;
    item.status = "resolved";
    item.decision = msg.decision;
    if (typeof msg.message === "string") item.message = msg.message;
    item.statusText = decisionText(item, msg.decision) + decidedByText(msg.decidedBy);
    this.view.permission(item);
  }

  /**
   * Answer permission `item`: "approve" (accept_diff, with `answers` to questions or a
   * `suggestion` index for "always allow") or "reject" (reject_diff, with an optional
   * `reason` and `interrupt: true` to stop Claude). Read-only clients send nothing.
   */
  decide(item, decision, extra = {}) {
    const chat = this.store.chat;
    if (!chat || this.store.readOnly || item.answerable === false) return;
    const frame = {
      type: decision === "approve" ? "accept_diff" : "reject_diff",
      sessionId: chat.sessionId,
      requestKey: item.requestKey,
    };
    if (decision === "approve") {
      if (extra.answers) frame.answers = extra.answers;
      if (Number.isInteger(extra.suggestion)) frame.suggestion = extra.suggestion;
    } else {
      const reason = typeof extra.reason === "string" ? extra.reason.trim().slice(0, REASON_MAX_CHARS) : "";
      if (reason) frame.reason = reason;
      if (extra.interrupt === true) frame.interrupt = true;
    }
    item.status = "sending";
    this.view.permission(item);
    if (this.request(frame, { kind: "decision", item })) {
      item.sent = { decision, ...extra, reason: frame.reason };
    } else {
      item.status = "pending";
      this.view.permission(item);
    }
  }

  /** Pending approvals past their expiry can no longer be answered. */
  expirePermissions(now) {
    const chat = this.store.chat;
    if (!chat) return;
    for (const item of chat.permissions.values()) {
      if (item.status === "pending" && Number(item.expiresAt) > 0 && item.expiresAt < now) {
        Object.assign(item, { status: "expired", statusText: "Expired" });
        this.view.permission(item);
      }
    }
  }

  // ---- errors ---------------------------------------------------------------------------

  /** An `error` frame (other than unauthorized): explain it where the request was made. */
  onError(msg) {
    const req = this.take(msg.requestId);
    req?.onError?.(msg);
    const words = errorText(msg.code, msg.message);
    if (req?.kind === "prompt") {
      Object.assign(req.pending, { status: "failed", error: words });
      if (this.store.chat) this.view.pending(this.store.chat.pending);
      return;
    }
    if (req?.kind === "decision") {
      req.item.status = "pending";
      req.item.sent = undefined;
      if (msg.code === "forbidden") {
        this.store.readOnly = true; // an older gateway did not say so in welcome
        this.view.renderAll(this.store.chat?.items ?? []);
      } else {
        this.view.permission(req.item);
      }
    }
    this.view.toast(words);
  }
}
