// Unit tests of the edit summaries: line deltas and diff rows.
import assert from "node:assert/strict";
import test from "node:test";

import { diffRows, formatEditDelta } from "../../../gateway/static/diff.js";

test("formatEditDelta counts lines with singular and plural", () => {
  assert.equal(formatEditDelta({ added: 12, removed: 3 }), "Added 12 lines, removed 3 lines");
  assert.equal(formatEditDelta({ added: 1, removed: 1 }), "Added 1 line, removed 1 line");
  assert.equal(formatEditDelta({ added: 4, removed: 0 }), "Added 4 lines");
  assert.equal(formatEditDelta({ added: 0, removed: 2 }), "Removed 2 lines");
  assert.equal(formatEditDelta({ added: 0, removed: 0 }), "No lines changed");
  assert.equal(formatEditDelta(undefined), "No lines changed");
});

test("diffRows classifies lines and numbers old and new sides across hunks", () => {
  const rows = diffRows({
    added: 2,
    removed: 1,
    hunks: [
      { oldStart: 10, lines: [" keep", "-old", "+new", "+extra"] },
      { oldStart: 20, lines: [" tail", "-gone"] },
    ],
  });
  assert.deepEqual(
    rows.map((r) => [r.kind, r.text, r.oldNo, r.newNo]),
    [
      ["hunk", "@@ line 10", null, null],
      ["ctx", "keep", 10, 10],
      ["del", "old", 11, null],
      ["add", "new", null, 11],
      ["add", "extra", null, 12],
      ["hunk", "@@ line 20", null, null],
      ["ctx", "tail", 20, 21],
      ["del", "gone", 21, null],
    ],
  );
});

test("diffRows numbers a created file from line 1", () => {
  const rows = diffRows({ added: 2, removed: 0, hunks: [{ oldStart: 0, lines: ["+a", "+b"] }] });
  assert.deepEqual(
    rows.map((r) => [r.kind, r.text, r.oldNo, r.newNo]),
    [["hunk", "@@ new file", null, null], ["add", "a", null, 1], ["add", "b", null, 2]],
  );
});

test("diffRows tolerates missing hunks and unprefixed lines", () => {
  assert.deepEqual(diffRows(undefined), []);
  assert.deepEqual(diffRows({ hunks: "nope" }), []);
  const rows = diffRows({ hunks: [{ lines: ["plain", 7] }] });
  assert.deepEqual(rows.map((r) => [r.kind, r.text]), [["hunk", "@@ line 1"], ["ctx", "plain"], ["ctx", "7"]]);
});
