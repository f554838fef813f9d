// The push service worker shows Approve/Deny only on a notification that carries a capability.
import assert from "node:assert/strict";
import test from "node:test";

// The service worker's global scope, as far as push-sw.js uses it when a push arrives.
const shown = [];
const listeners = {};
globalThis.self = {
  registration: {
    scope: "https://relay.example/",
    showNotification: async (title, options) => {
      shown.push({ title, options });
    },
    getNotifications: async () => [],
  },
  addEventListener: (type, fn) => {
    listeners[type] = fn;
  },
};
await import("../../../gateway/static/push-sw.js");

async function push(msg) {
  const pending = [];
  listeners.push({ data: { json: () => msg }, waitUntil: (p) => pending.push(p) });
  await Promise.all(pending);
  return shown.at(-1).options;
}

const ACTIONS = [
  { action: "approve", title: "Approve" },
  { action: "deny", title: "Deny" },
];

test("a request without a capability shows no actions, even if some were sent", async () => {
  const base = { kind: "approval", title: "laptop · fix", body: "Bash: …", tag: "relaybus:s" };
  const withoutCap = await push({ ...base, actions: ACTIONS });
  assert.equal(withoutCap.actions, undefined);
  assert.equal(withoutCap.requireInteraction, true);
  const withCap = await push({ ...base, cap: "c1", actions: ACTIONS });
  assert.deepEqual(withCap.actions, ACTIONS);
  const note = await push({ kind: "waiting", title: "Waiting", body: "x", tag: "t", cap: "c", actions: ACTIONS });
  assert.equal(note.actions, undefined, "only a request has actions");
});
