// Unit tests of the in-memory chat store: seqId dedupe and order, the 500 cap, echoes.
import assert from "node:assert/strict";
import test from "node:test";

import { legacyBlocks } from "../../../gateway/static/legacy.js";
import { Chat, MESSAGE_CAP, Store } from "../../../gateway/static/store.js";

const ev = (seqId) => ({ kind: "event", seqId, event: { type: "assistant", blocks: [] } });

test("events are deduplicated by seqId and kept in seq order", () => {
  const chat = new Chat("s");
  assert.equal(chat.add(ev(1)).inOrder, true);
  assert.equal(chat.add(ev(3)).inOrder, true);
  assert.equal(chat.add(ev(3)).added, false);
  const res = chat.add(ev(2));
  assert.equal(res.added, true);
  assert.equal(res.inOrder, false);
  assert.deepEqual(chat.items.map((i) => i.seqId), [1, 2, 3]);
  assert.equal(chat.lastSeqId, 3);
});

test("an item without a seqId is kept, never deduplicated, and does not move lastSeqId", () => {
  const chat = new Chat("s");
  chat.add(ev(4));
  assert.equal(chat.add({ kind: "event", event: {} }).added, true);
  assert.equal(chat.add({ kind: "event", event: {} }).added, true);
  assert.equal(chat.items.length, 3);
  assert.equal(chat.lastSeqId, 4);
  assert.equal(chat.add(ev(5)).inOrder, true);
});

test("a chat holds at most MESSAGE_CAP items, dropping the oldest", () => {
  const chat = new Chat("s");
  let last = null;
  for (let i = 1; i <= MESSAGE_CAP + 20; i += 1) last = chat.add(ev(i));
  assert.equal(MESSAGE_CAP, 500);
  assert.equal(chat.items.length, MESSAGE_CAP);
  assert.equal(chat.items[0].seqId, 21);
  assert.equal(last.trimmedBelow, 21);
  assert.equal(chat.add(ev(5)).added, false, "an already-seen, trimmed event is not re-added");
});

test("a gap resets the chat to a single marker and forgets seen seqIds", () => {
  const chat = new Chat("s");
  chat.add(ev(7));
  chat.resetWithGap({ fromSeqId: 8, toSeqId: 40, reason: "trimmed" });
  assert.deepEqual(chat.items.map((i) => i.kind), ["gap"]);
  assert.equal(chat.lastSeqId, 0);
  assert.equal(chat.add(ev(7)).added, true);
  chat.add(ev(41));
  assert.deepEqual(chat.items.map((i) => i.seqId), [7, 7.5, 41], "the marker sits at the hole");
  chat.resetWithGap({ reason: "epoch" });
  chat.add(ev(1));
  assert.deepEqual(chat.items.map((i) => i.kind), ["gap", "event"], "epoch marker sorts first");
});

test("an optimistic echo is matched once by text within the window", () => {
  const chat = new Chat("s");
  chat.addPending("p1", "run the tests", 1000);
  assert.equal(chat.matchEcho("other", 2000), null);
  assert.equal(chat.matchEcho("  run the tests\n", 2000).id, "p1");
  assert.equal(chat.matchEcho("run the tests", 2000), null);
  chat.addPending("p2", "late", 0);
  assert.equal(chat.matchEcho("late", 10 * 60_000), null, "outside the window");
});

test("the session list sorts by activity and turn_status updates state", () => {
  const store = new Store();
  store.setSessions([
    { id: "a", lastActivity: 10 },
    { id: "b", lastActivity: 30 },
    { id: "c", startedAt: 20 },
    { nope: true },
  ]);
  assert.deepEqual(store.sorted().map((s) => s.id), ["b", "c", "a"]);
  store.applyTurnStatus({ sessionId: "a", state: "working", since: 50, seqId: 9 });
  assert.equal(store.sorted()[0].id, "a");
  assert.equal(store.sessions.get("a").state, "working");
  store.noteSeq(9);
  store.noteSeq(4);
  assert.equal(store.lastSeqId, 9);
});

test("the legacy fallback only maps the documented shapes", () => {
  assert.deepEqual(legacyBlocks({ type: "user", data: { message: { content: "hi" } } }), [
    { kind: "text", text: "hi" },
  ]);
  const blocks = legacyBlocks({
    type: "assistant",
    data: { message: { content: [{ type: "tool_use", id: "t1", name: "Bash", input: { command: "ls" } }, { type: "mystery" }] } },
  });
  assert.deepEqual(blocks, [{ kind: "tool", toolUseId: "t1", name: "Bash", input: { command: "ls" } }]);
  assert.equal(legacyBlocks({ type: "x" }), null);
  assert.equal(legacyBlocks({ type: "x", data: { message: { content: [{ type: "mystery" }] } } }), null);
});
