// Unit tests of outcomes told apart from messages: interrupts and rejected tools.
import assert from "node:assert/strict";
import test from "node:test";

import { interruptNotice, rejectionOf, rejectionText } from "../../../gateway/static/outcomes.js";

const CLI = "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a file edit, the new_string was NOT written to the file).";

test("the CLI's interrupt lines are notices; a prompt that merely mentions one is not", () => {
  assert.equal(interruptNotice("[Request interrupted by user for tool use]"), "Interrupted while a tool was waiting");
  assert.equal(interruptNotice("[Request interrupted by user]"), "Interrupted");
  assert.equal(interruptNotice("why did you print [Request interrupted by user]?"), null);
  assert.equal(interruptNotice("[Request interrupted by user] and then more text I typed"), null);
  assert.equal(interruptNotice(undefined), null);
});

test("a rejection in the terminal: by whom, with the person's words when the CLI quotes them", () => {
  const r = rejectionOf({ isError: true, text: `${CLI} To tell you how to proceed, the user said:\nuse yarn` });
  assert.deepEqual(r, { by: "in the terminal", reason: "use yarn", stopped: false });
  assert.equal(rejectionText(r), "Rejected in the terminal: use yarn");
  assert.equal(rejectionText(rejectionOf({ isError: true, text: CLI })), "Rejected in the terminal");
});

test("a rejection through relaybus: the hook's reason is the result; this client's own says by you", () => {
  const other = rejectionOf({ isError: true, text: "not on main" }, { decision: "deny" });
  assert.equal(rejectionText(other), "Rejected from relaybus: not on main");
  const mine = { decision: "deny", sent: { decision: "reject", reason: "no", interrupt: true } };
  assert.equal(rejectionText(rejectionOf({ isError: true, text: "" }, mine)), "Rejected by you · Claude stopped: no");
});

test("ordinary errors and successes are not rejections", () => {
  assert.equal(rejectionOf({ isError: true, text: "Exit code 1" }), null);
  assert.equal(rejectionOf({ isError: true, text: "Exit code 1" }, { decision: "allow" }), null);
  assert.equal(rejectionOf({ isError: false, text: CLI }), null);
});
