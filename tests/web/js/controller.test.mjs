// The client's protocol behaviour, driven frame by frame: resume, gaps, dedupe, requests.
import assert from "node:assert/strict";
import test from "node:test";

import { CAPABILITIES, Controller } from "../../../gateway/static/controller.js";

// Every View method; a call to any other name fails the test (TypeError).
const VIEW = ["list", "header", "turn", "history", "append", "renderAll", "pending", "permission",
  "freshness", "toast", "signin", "started", "unavailable"];
const T0 = 1_800_000_000_000;

/** A controller whose frames go to `sent` (while `conn.open`) and whose view calls are recorded. */
function rig({ token = "tok" } = {}) {
  const sent = [];
  const calls = [];
  const conn = {
    open: true,
    stopped: false,
    healthy: 0,
    send(frame) {
      if (this.open) sent.push(frame);
      return this.open;
    },
    stop() {
      this.stopped = true;
    },
    markHealthy() {
      this.healthy += 1;
    },
  };
  const view = Object.fromEntries(VIEW.map((name) => [name, (...args) => calls.push([name, ...args])]));
  const clock = { now: T0 };
  const ctl = new Controller({ conn, view, token: () => token, now: () => clock.now });
  const called = (name) => calls.filter((c) => c[0] === name).map((c) => c.slice(1));
  const frames = (type) => sent.filter((f) => f.type === type);
  const clear = () => {
    sent.length = 0;
    calls.length = 0;
  };
  return { ctl, conn, sent, calls, clock, called, frames, clear };
}

/** Connect: hello, welcome at `head`, and the sessions answer. */
function connect(r, { epoch = "e1", head = 0, sessions = [{ id: "s1", host: "h" }] } = {}) {
  const hello = r.ctl.hello();
  r.ctl.status({ state: "open" });
  r.ctl.handle({ type: "welcome", epoch, seqId: head });
  r.ctl.handle({ type: "sessions", sessions, seqId: head });
  return hello;
}

const event = (seqId, ev = { type: "assistant", blocks: [{ kind: "text", text: `line ${seqId}` }] }) => ({
  type: "session_event",
  sessionId: "s1",
  seqId,
  event: ev,
});

/** Open s1 and answer its watch (history replayed up to `head`). */
function openChat(r, head = 0) {
  r.ctl.open("s1");
  const watch = r.frames("watch_session").at(-1);
  r.ctl.handle({ type: "watch_ack", requestId: watch.requestId, sessionId: "s1", watching: true, seqId: head });
  return watch;
}

test("the first hello carries the token and capabilities but no resume position", () => {
  const r = rig();
  const hello = r.ctl.hello();
  assert.deepEqual(hello, { type: "hello", capabilities: CAPABILITIES, token: "tok" });
  assert.deepEqual(r.ctl.afterHello().map((f) => f.type), ["list_sessions"]);
  assert.equal("token" in rig({ token: "" }).ctl.hello(), false, "no token: none is sent");
});

test("a reconnect resumes with the epoch and the highest broadcast seqId seen", () => {
  const r = rig();
  connect(r, { epoch: "e1", head: 10 });
  r.ctl.handle({ type: "turn_status", sessionId: "s1", state: "working", since: T0, seqId: 42 });
  r.ctl.handle({ type: "session_ended", sessionId: "s1", seqId: 41 });
  const hello = r.ctl.hello();
  assert.equal(hello.epoch, "e1");
  assert.equal(hello.lastSeqId, 42);
});

test("a resume whose welcome is ahead says how many events are catching up until the list answers", () => {
  const r = rig();
  connect(r, { head: 100 });
  r.ctl.status({ state: "waiting", retryInMs: 500 });
  assert.deepEqual(r.called("freshness").at(-1)[0], { state: "waiting", retryInMs: 500, catchingUp: 0, first: false });
  r.ctl.hello();
  r.ctl.status({ state: "open" });
  r.ctl.handle({ type: "welcome", epoch: "e1", seqId: 140 });
  assert.equal(r.called("freshness").at(-1)[0].catchingUp, 40);
  assert.equal(r.conn.healthy, 2, "every welcome resets the backoff");
  r.ctl.handle({ type: "sessions", sessions: [], seqId: 140 });
  assert.equal(r.called("freshness").at(-1)[0].catchingUp, 0);
});

test("the open chat is re-watched after a reconnect from its last seen event", () => {
  const r = rig();
  connect(r);
  const first = openChat(r);
  assert.equal("sinceSeqId" in first, false, "a newly opened chat loads its history");
  r.ctl.handle(event(5));
  r.ctl.handle(event(7));
  r.clear();
  r.ctl.hello();
  r.ctl.handle({ type: "welcome", epoch: "e1", seqId: 7 });
  assert.deepEqual(r.frames("watch_session").map((f) => [f.sessionId, f.sinceSeqId]), [["s1", 7]]);
});

test("duplicate seqIds are dropped; a late event is placed in order with a full redraw", () => {
  const r = rig();
  connect(r);
  openChat(r);
  r.ctl.handle(event(3));
  r.ctl.handle(event(3));
  r.ctl.handle(event(5));
  assert.deepEqual(r.called("append").map(([item]) => item.seqId), [3, 5]);
  r.ctl.handle(event(4));
  const [items] = r.called("renderAll").at(-1);
  assert.deepEqual(items.map((i) => i.seqId), [3, 4, 5]);
  r.ctl.handle(event(4));
  assert.equal(r.called("renderAll").length, 1, "the repeat of 4 changes nothing");
});

test("events of a session other than the open chat are ignored", () => {
  const r = rig();
  connect(r);
  openChat(r);
  r.ctl.handle({ ...event(9), sessionId: "other" });
  assert.equal(r.called("append").length, 0);
  assert.equal(r.ctl.store.chat.lastSeqId, 0);
});

test("gap_detected for the open chat leaves one marker and reloads the session", () => {
  const r = rig();
  connect(r);
  openChat(r);
  r.ctl.handle(event(3));
  r.clear();
  r.ctl.handle({ type: "gap_detected", sessionId: "s1", fromSeqId: 4, toSeqId: 90, reason: "trimmed" });
  const [items] = r.called("renderAll").at(-1);
  assert.deepEqual(items.map((i) => i.kind), ["gap"]);
  const reload = r.frames("watch_session");
  assert.equal(reload.length, 1);
  assert.equal("sinceSeqId" in reload[0], false, "the reload replays the session from its start");
  r.ctl.handle(event(3));
  const shown = r.called("renderAll").at(-1)[0].map((i) => [i.kind, i.seqId]);
  assert.deepEqual(shown, [["event", 3], ["gap", 3.5]], "events seen before the gap are shown again");
});

test("a gap of another session is ignored; a connection-wide gap reloads the chat only once", () => {
  const r = rig();
  connect(r);
  openChat(r);
  r.clear();
  r.ctl.handle({ type: "gap_detected", sessionId: "other", fromSeqId: 1, toSeqId: 2 });
  assert.equal(r.sent.length + r.calls.length, 0);
  r.ctl.handle({ type: "gap_detected", fromSeqId: 1, toSeqId: 2, reason: "trimmed" });
  r.ctl.handle({ type: "gap_detected", fromSeqId: 3, toSeqId: 4, reason: "trimmed" });
  assert.equal(r.frames("watch_session").length, 1);
});

test("a new epoch on welcome forgets the resume position and reloads the open chat", () => {
  const r = rig();
  connect(r, { epoch: "e1", head: 50 });
  openChat(r);
  r.ctl.handle(event(50));
  r.clear();
  r.ctl.hello();
  r.ctl.handle({ type: "welcome", epoch: "e2", seqId: 3 });
  assert.equal(r.ctl.store.epoch, "e2");
  assert.equal(r.ctl.store.lastSeqId, 3, "seqIds restart in the new epoch");
  assert.deepEqual(r.called("renderAll").at(-1)[0].map((i) => i.gap.reason), ["epoch"]);
  assert.deepEqual(r.frames("watch_session").map((f) => f.sinceSeqId), [undefined]);
  assert.deepEqual(r.ctl.hello().lastSeqId, 3);
});

test("leaving a chat unwatches it; the list is asked for again only on a live connection", () => {
  const r = rig();
  r.ctl.open("s1");
  assert.equal(r.sent.length, 0, "nothing is sent before welcome");
  assert.equal(r.ctl.leaveUnless("s1"), null);
  assert.equal(r.ctl.leaveUnless(null), "s1");
  assert.equal(r.ctl.store.chat, null);
  r.ctl.refreshList();
  assert.equal(r.frames("list_sessions").length, 0);
  connect(r);
  r.ctl.refreshList();
  assert.equal(r.frames("list_sessions").length, 1);
  assert.equal(r.ctl.open("s1"), true);
  assert.equal(r.ctl.open("s1"), false, "opening the open chat does nothing");
  assert.deepEqual(r.frames("watch_session").map((f) => f.sessionId), ["s1"]);
});

test("a prompt shows an echo that is confirmed by prompt_sent and removed by its user event", () => {
  const r = rig();
  connect(r);
  openChat(r);
  r.ctl.actions.sendPrompt("fix the test");
  const [frame] = r.frames("prompt");
  assert.deepEqual([frame.sessionId, frame.message], ["s1", "fix the test"]);
  assert.deepEqual(r.ctl.store.chat.pending.map((p) => p.status), ["sending"]);
  r.ctl.handle({ type: "prompt_sent", requestId: frame.requestId });
  assert.deepEqual(r.ctl.store.chat.pending.map((p) => p.status), ["sent"]);
  r.ctl.handle(event(8, { type: "user", blocks: [{ kind: "text", text: "fix the test" }] }));
  assert.deepEqual(r.ctl.store.chat.pending, []);
  assert.deepEqual(r.called("pending").at(-1), [[]]);
});

test("a prompt fails where it was made: offline at once, or with the server's error in words", () => {
  const r = rig();
  connect(r);
  openChat(r);
  r.conn.open = false;
  r.ctl.actions.sendPrompt("one");
  assert.deepEqual(r.ctl.store.chat.pending.map((p) => [p.status, p.error]), [["failed", "You're offline."]]);
  r.conn.open = true;
  r.ctl.actions.sendPrompt("two");
  const [frame] = r.frames("prompt");
  r.ctl.handle({ type: "error", requestId: frame.requestId, code: "busy" });
  assert.match(r.ctl.store.chat.pending[1].error, /busy with another turn/);
  assert.equal(r.called("toast").length, 0, "a prompt's error is shown on its echo, not a toast");
  r.ctl.actions.dismiss(r.ctl.store.chat.pending[0]);
  assert.deepEqual(r.ctl.store.chat.pending.map((p) => p.text), ["two"]);
});

test("an unauthorized error stops the connection and asks for a token", () => {
  const r = rig({ token: "" });
  r.ctl.handle({ type: "error", code: "unauthorized" });
  assert.equal(r.conn.stopped, true);
  assert.deepEqual(r.called("signin"), [["This server needs a token."]]);
  r.ctl.status({ state: "unauthorized" });
  assert.equal(r.called("signin").length, 2);
  assert.equal(r.called("freshness").length, 0);
});

test("a new conversation is listed, watched, and its first prompt sent once the watch is on", () => {
  const r = rig();
  connect(r);
  assert.equal(r.ctl.actions.startConversation({ host: "h", cwd: "", text: "hello there" }), true);
  const [req] = r.frames("new_conversation");
  assert.deepEqual([req.host, "cwd" in req], ["h", false]);
  r.ctl.handle({ type: "new_conversation_ack", requestId: req.requestId, ok: true, sessionId: "n1", host: "h" });
  assert.deepEqual(r.called("started"), [[{ sessionId: "n1" }]]);
  assert.equal(r.ctl.store.info("n1").firstPrompt, "hello there");
  r.ctl.open("n1");
  assert.equal(r.frames("prompt").length, 0, "not before the watch is acknowledged");
  const watch = r.frames("watch_session").at(-1);
  r.ctl.handle({ type: "watch_ack", requestId: watch.requestId, sessionId: "n1", watching: true, seqId: 0 });
  assert.deepEqual(r.frames("prompt").map((f) => [f.sessionId, f.message]), [["n1", "hello there"]]);
});

test("a refused new conversation is explained in words", () => {
  const r = rig();
  connect(r);
  r.ctl.actions.startConversation({ host: "h", cwd: "/x", text: "hi" });
  const [req] = r.frames("new_conversation");
  r.ctl.handle({ type: "new_conversation_ack", requestId: req.requestId, ok: false, errorCode: "cwd_not_allowed" });
  assert.deepEqual(r.called("started"), [[{ error: "That machine doesn't allow prompts in this folder." }]]);
});

test("a permission card appears once, resolves with words, and expires when its time is up", () => {
  const r = rig();
  connect(r);
  openChat(r);
  const perm = { type: "permission_request", sessionId: "s1", seqId: 12, requestKey: "k1", name: "Bash",
    input: { command: "ls" }, expiresAt: T0 + 60_000 };
  r.ctl.handle(perm);
  r.ctl.handle(perm);
  assert.equal(r.called("append").length, 1);
  const item = r.ctl.store.chat.permissions.get("k1");
  assert.equal(item.status, "pending");
  r.ctl.actions.expirePermissions(T0 + 61_000);
  assert.equal(item.status, "expired");
  r.ctl.handle({ type: "permission_resolved", requestKey: "k1", decision: "deny" });
  assert.deepEqual([item.status, item.statusText], ["resolved", "Rejected"]);
});

test("turn changes and session updates reach the list, and the chat when it is open", () => {
  const r = rig();
  connect(r);
  openChat(r);
  r.clear();
  r.ctl.handle({ type: "turn_status", sessionId: "s1", state: "waiting", waitingFor: "approval", seqId: 3 });
  assert.equal(r.ctl.store.info("s1").waitingFor, "approval");
  r.ctl.handle({ type: "session_updated", sessionId: "s1", session: { id: "s1", title: "Renamed" }, seqId: 4 });
  assert.equal(r.called("header").at(-1)[0].title, "Renamed");
  assert.deepEqual(r.calls.map((c) => c[0]), ["list", "turn", "list", "header", "turn"]);
  r.ctl.handle({ type: "some_future_frame", requestId: "x" });
  assert.equal(r.calls.length, 5, "unknown frames are ignored");
});

test("a rewound gap voids what was held from fromSeqId: resume from below it, with the new token", () => {
  const r = rig();
  connect(r, { epoch: "e1", head: 40 });
  openChat(r);
  r.ctl.handle(event(44));
  r.ctl.handle({ type: "gap_detected", fromSeqId: 33, toSeqId: 44, reason: "rewound", epoch: "e1.1", seqId: 32 });
  assert.deepEqual(r.called("renderAll").at(-1)[0].map((i) => i.gap?.reason), ["rewound"]);
  r.clear();
  r.ctl.handle({ type: "gap_detected", fromSeqId: 35, toSeqId: 44, reason: "rewound", epoch: "e1.2", seqId: 34 });
  assert.equal(r.frames("watch_session").length, 1, "a second rewound reloads the chat again");
  const hello = r.ctl.hello();
  assert.equal(hello.lastSeqId, 32);
  assert.equal(hello.epoch, "e1.2");
});

test("a welcome whose token differs only in the rewind generation is not a new epoch", () => {
  const r = rig();
  connect(r, { epoch: "e1", head: 50 });
  openChat(r);
  r.ctl.handle(event(50));
  r.clear();
  r.ctl.hello();
  r.ctl.handle({ type: "welcome", epoch: "e1.3", seqId: 60 });
  assert.equal(r.ctl.store.epoch, "e1.3");
  assert.equal(r.ctl.store.lastSeqId, 50, "the resume position is kept");
  assert.equal(r.called("renderAll").length, 0, "the chat is not reset");
});

/** s1 open with one permission_request carrying `extra` (questions, suggestions, plan…). */
function withRequest(extra = {}, { readOnly } = {}) {
  const r = rig();
  r.ctl.hello();
  r.ctl.status({ state: "open" });
  r.ctl.handle({ type: "welcome", epoch: "e1", seqId: 0, ...(readOnly === undefined ? {} : { readOnly }) });
  r.ctl.handle({ type: "sessions", sessions: [{ id: "s1", host: "h" }], seqId: 0 });
  openChat(r);
  r.ctl.handle({ type: "permission_request", sessionId: "s1", seqId: 5, requestKey: "k1", name: "Bash",
    input: { command: "npm test" }, expiresAt: T0 + 60_000, ...extra });
  r.clear();
  return { r, item: r.ctl.store.chat.permissions.get("k1") };
}

const bare = (f) => Object.fromEntries(Object.entries(f).filter(([k]) => k !== "requestId" && k !== "traceId"));

test("answers, an always-allow index, a reason and reject-and-stop go out as the wire shape says", () => {
  const { r, item } = withRequest({ suggestions: [{ type: "addRules", text: "Always allow `npm test *`" }] });
  assert.deepEqual(item.suggestions, [{ index: 0, text: "Always allow `npm test *`" }]);
  r.ctl.actions.decide(item, "approve", { answers: { "Q?": "A" } });
  r.ctl.actions.decide(item, "approve", { suggestion: 0 });
  r.ctl.actions.decide(item, "reject", { reason: "  not now  ", interrupt: true });
  r.ctl.actions.decide(item, "reject", { reason: "   " });
  assert.deepEqual(r.sent.map(bare), [
    { type: "accept_diff", sessionId: "s1", requestKey: "k1", answers: { "Q?": "A" } },
    { type: "accept_diff", sessionId: "s1", requestKey: "k1", suggestion: 0 },
    { type: "reject_diff", sessionId: "s1", requestKey: "k1", reason: "not now", interrupt: true },
    { type: "reject_diff", sessionId: "s1", requestKey: "k1" },
  ]);
});

test("a read-only welcome, or an unanswerable request, sends no decision at all", () => {
  const ro = withRequest({}, { readOnly: true });
  assert.equal(ro.r.ctl.store.readOnly, true);
  ro.r.ctl.actions.decide(ro.item, "approve");
  assert.deepEqual(ro.r.sent, []);
  const plan = withRequest({ plan: "# p", answerable: false, answerableReason: "At the terminal." });
  assert.deepEqual([plan.item.answerable, plan.item.answerableReason, plan.item.plan], [false, "At the terminal.", "# p"]);
  plan.r.ctl.actions.decide(plan.item, "approve");
  assert.deepEqual(plan.r.sent, []);
});

test("a forbidden answer (an older gateway) turns the client read-only and redraws the cards", () => {
  const { r, item } = withRequest();
  r.ctl.actions.decide(item, "approve");
  const req = r.frames("accept_diff")[0];
  r.ctl.handle({ type: "error", requestId: req.requestId, code: "forbidden", message: "read-only" });
  assert.equal(r.ctl.store.readOnly, true);
  assert.equal(item.status, "pending");
  assert.equal(r.called("renderAll").length, 1);
});

test("a decided card says what was answered: questions, always allow, plans, stop", () => {
  const q = withRequest({ questions: [{ question: "Q?", options: [{ label: "A" }] }] });
  q.r.ctl.handle({ type: "permission_resolved", requestKey: "k1", decision: "allow" });
  assert.equal(q.item.statusText, "Answered");
  const s = withRequest({ suggestions: [{ text: "Always allow `x`" }] });
  s.r.ctl.actions.decide(s.item, "approve", { suggestion: 0 });
  s.r.ctl.handle({ type: "permission_resolved", requestKey: "k1", decision: "allow" });
  assert.equal(s.item.statusText, "Approved · always allowed");
  const p = withRequest({ plan: "# p" });
  p.r.ctl.handle({ type: "permission_resolved", requestKey: "k1", decision: "deny" });
  assert.equal(p.item.statusText, "Kept planning");
  const stop = withRequest();
  stop.r.ctl.actions.decide(stop.item, "reject", { interrupt: true });
  stop.r.ctl.handle({ type: "permission_resolved", requestKey: "k1", decision: "deny", message: "m" });
  assert.deepEqual([stop.item.statusText, stop.item.message], ["Rejected · Claude stopped", "m"]);
});

test("session_started for the open chat redraws its header (cwd known at last)", () => {
  const { r } = withRequest();
  r.ctl.handle({ type: "session_started", sessionId: "s1", cwd: "/w/proj", host: "h", seqId: 9 });
  assert.equal(r.called("header").at(-1)[0].cwd, "/w/proj");
});

test("an unavailable first list says so (no toast) and asks again; later errors toast", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  const r = rig();
  r.ctl.hello();
  r.ctl.status({ state: "open" });
  r.ctl.handle({ type: "welcome", epoch: "e1", seqId: 0 });
  r.clear();
  r.ctl.handle({ type: "error", code: "unavailable", message: "storage unavailable, retry", requestId: "l-x" });
  assert.deepEqual(r.called("unavailable"), [[3000]]);
  assert.deepEqual(r.called("toast"), []);
  t.mock.timers.tick(3000);
  assert.equal(r.frames("list_sessions").length, 1);
  r.ctl.handle({ type: "sessions", sessions: [{ id: "s1", host: "h" }], seqId: 0 });
  r.clear();
  r.ctl.handle({ type: "error", code: "unavailable", message: "storage unavailable, retry", requestId: "l-y" });
  assert.deepEqual(r.called("unavailable"), []);
  assert.equal(r.called("toast").length, 1);
});
