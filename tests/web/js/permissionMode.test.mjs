// Unit tests of the permission-mode words and the switch's choices.
import assert from "node:assert/strict";
import test from "node:test";

import { MODE_WORDS, SWITCHABLE, modeWords } from "../../../gateway/static/permissionMode.js";

test("every mode the CLI writes has words; unknown ones show as written, cut", () => {
  assert.equal(modeWords("acceptEdits"), "Accept edits");
  assert.equal(modeWords("default"), "Ask first");
  assert.equal(modeWords("futureMode"), "futureMode");
  assert.equal(modeWords("x".repeat(100)).length, 40);
  assert.equal(modeWords(undefined), "");
  assert.equal(modeWords("constructor"), "constructor"); // never a prototype member
});

test("the switch offers the CLI's Shift+Tab cycle only", () => {
  assert.deepEqual([...SWITCHABLE], ["default", "acceptEdits", "plan", "auto"]);
  for (const m of SWITCHABLE) assert.ok(MODE_WORDS[m]);
  assert.ok(!SWITCHABLE.includes("bypassPermissions"));
});
