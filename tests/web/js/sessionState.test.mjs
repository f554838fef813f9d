// Unit tests of the list's at-a-glance states, older/recent split, prompts and freshness texts.
import assert from "node:assert/strict";
import test from "node:test";

import {
  emptyText,
  freshnessText,
  headerTitle,
  isOlder,
  promptLine,
  promptsAllowed,
  promptsOffText,
  recentCwds,
  sessionState,
  sessionTitle,
  splitSessions,
  STALE_MS,
} from "../../../gateway/static/sessionState.js";

const NOW = 1_800_000_000_000;

test("working shows for how long, and says when it has been quiet too long", () => {
  const s = { state: "working", since: NOW - 125_000, lastActivity: NOW - 1000, live: true };
  assert.deepEqual(sessionState(s, NOW), { kind: "working", text: "working 2m 05s", detail: "", stale: false });
  const quiet = { ...s, since: NOW - 30 * 60_000, lastActivity: NOW - STALE_MS - 12 * 60_000 };
  const st = sessionState(quiet, NOW);
  assert.equal(st.stale, true);
  assert.equal(st.detail, "no output for 17 min");
});

test("waiting says what for; ended and idle are plain", () => {
  assert.deepEqual(sessionState({ state: "waiting", waitingFor: "approve Edit" }, NOW).detail, "approve Edit");
  assert.equal(sessionState({ state: "idle", live: false }, NOW).kind, "ended");
  assert.equal(sessionState({ state: "idle", live: true }, NOW).kind, "idle");
  assert.equal(sessionState({}, NOW).text, "idle");
});

test("older sessions: history not loaded, or quiet for a day and not live", () => {
  assert.equal(isOlder({ historyLoaded: false, lastActivity: NOW }, NOW), true);
  assert.equal(isOlder({ live: false, lastActivity: NOW - 2 * 86400_000 }, NOW), true);
  assert.equal(isOlder({ live: true, lastActivity: NOW - 2 * 86400_000 }, NOW), false);
  assert.equal(isOlder({ live: false, lastActivity: NOW - 3600_000 }, NOW), false);
  const { recent, older } = splitSessions(
    [{ id: "a", live: true }, { id: "b", historyLoaded: false }, { id: "c", lastActivity: NOW }],
    NOW,
  );
  assert.deepEqual(recent.map((s) => s.id), ["a", "c"]);
  assert.deepEqual(older.map((s) => s.id), ["b"]);
});

test("recent cwds of a machine, distinct and newest first", () => {
  const list = [
    { host: "a", cwd: "/p/one" },
    { host: "b", cwd: "/p/two" },
    { host: "a", cwd: "/p/three" },
    { host: "a", cwd: "/p/one" },
    { host: "a", cwd: "" },
  ];
  assert.deepEqual(recentCwds(list, "a"), ["/p/one", "/p/three"]);
});

test("prompts allowed from the heartbeat capabilities; unknown without hosts", () => {
  const hosts = [{ host: "lap", capabilities: ["load_history", "prompts"] }, { host: "srv", capabilities: [] }];
  assert.equal(promptsAllowed(hosts, "lap"), true);
  assert.equal(promptsAllowed(hosts, "srv"), false);
  assert.equal(promptsAllowed(hosts, "gone"), false);
  assert.equal(promptsAllowed(undefined, "lap"), null);
  assert.match(promptsOffText(hosts, "srv"), /RELAYBUS_ALLOW_PROMPTS=true/);
  assert.match(promptsOffText(hosts, "gone"), /offline/);
  assert.equal(promptsOffText(hosts, "lap"), "");
});

test("empty list and freshness texts", () => {
  assert.match(emptyText([]), /no machine is connected/);
  assert.match(emptyText([{ host: "lap" }]), /Connected: lap/);
  assert.equal(freshnessText({ state: "open", catchingUp: 340 }), "Catching up: 340 events…");
  assert.equal(freshnessText({ state: "connecting" }), "Reconnecting…");
  assert.match(freshnessText({ state: "waiting", retryInMs: 2000 }), /^Connection lost\. Reconnecting in 2s…$/);
  assert.equal(freshnessText({ state: "open", catchingUp: 0 }), "");
});

test("the first prompt is a one-line subtitle", () => {
  assert.equal(promptLine({ firstPrompt: "fix\nthe bug" }), "fix");
  assert.equal(promptLine({}), "");
});

test("sessionTitle prefers title, then first prompt, then cwd basename, then the id prefix", () => {
  assert.equal(sessionTitle({ id: "abcdef123456", cwd: "/p/app", title: "Fix login" }), "Fix login");
  assert.equal(sessionTitle({ id: "abcdef123456", cwd: "/p/app", firstPrompt: "do it" }), "do it");
  assert.equal(sessionTitle({ id: "abcdef123456", title: "T", firstPrompt: "do it" }), "T");
  assert.equal(sessionTitle({ id: "abcdef123456", cwd: "/p/app/", title: "  " }), "app");
  assert.equal(sessionTitle({ id: "abcdef123456", cwd: "" }), "abcdef12");
});

test("headerTitle follows the seed: title, then cwd basename, then the id prefix (never the first prompt)", () => {
  assert.equal(headerTitle({ id: "abcdef123456", cwd: "/p/app", title: " Fix login ", firstPrompt: "hi" }), "Fix login");
  assert.equal(headerTitle({ id: "abcdef123456", cwd: "/p/app/", firstPrompt: "hi" }), "app");
  assert.equal(headerTitle({ id: "abcdef123456", firstPrompt: "hi" }), "abcdef12");
  assert.equal(headerTitle({}), "session");
});
