// Unit tests of the Notifications sheet's choices: machines as toggles, muted sessions by title.
import assert from "node:assert/strict";
import test from "node:test";

import { knownMachines, mutedRows } from "../../../gateway/static/pushPrefs.js";

test("machines offered: connected, from listed sessions and already picked, once each, sorted", () => {
  const hosts = [{ host: "laptop" }, { host: "ci" }, {}];
  const sessions = [{ id: "a", host: "server" }, { id: "b", host: "laptop" }, { id: "c" }];
  assert.deepEqual(knownMachines(hosts, sessions, ["gone-box"]), ["ci", "gone-box", "laptop", "server"]);
  assert.deepEqual(knownMachines(null, null, null), []);
});

test("muted sessions are named by their title, or cwd, or the id prefix when unknown", () => {
  const sessions = [{ id: "s1", title: "Fix login" }, { id: "s2", cwd: "/w/api" }];
  assert.deepEqual(mutedRows(["s1", "s2", "0123456789", 7], sessions), [
    { id: "s1", title: "Fix login" },
    { id: "s2", title: "api" },
    { id: "0123456789", title: "01234567" },
  ]);
  assert.deepEqual(mutedRows(undefined, []), []);
});

test("the Notifications sheet names what is missing for push, most basic cause first", async () => {
  const { pushBlocker } = await import("../../../gateway/static/pushPrefs.js");
  const ok = { secure: true, serviceWorker: true, pushManager: true, notification: true, permission: "default", ios: false, standalone: false, serverKey: true };
  assert.equal(pushBlocker(ok), null);
  assert.match(pushBlocker({ ...ok, secure: false, serviceWorker: false, pushManager: false }), /HTTPS.*root certificate/);
  assert.match(pushBlocker({ ...ok, ios: true, pushManager: false }), /Add to Home Screen/);
  assert.match(pushBlocker({ ...ok, serviceWorker: false }), /no service worker/);
  assert.match(pushBlocker({ ...ok, pushManager: false }), /no Web Push/);
  assert.match(pushBlocker({ ...ok, permission: "denied" }), /blocked for this site/);
  assert.match(pushBlocker({ ...ok, serverKey: false }), /no push key \(VAPID\)/);
});
