// Unit tests of the plain-text formatting: names, cuts, sizes, durations, ages.
import assert from "node:assert/strict";
import test from "node:test";

import { basename, formatAgo, formatBytes, formatElapsed, shorten } from "../../../gateway/static/text.js";

test("sizes, elapsed times and ages read naturally", () => {
  assert.equal(formatBytes(512), "512 B");
  assert.equal(formatBytes(2048), "2.0 KB");
  assert.equal(formatBytes(5 * 1024 * 1024), "5.0 MB");
  assert.equal(formatBytes(undefined), "unknown size");
  assert.equal(formatElapsed(7_400), "7s");
  assert.equal(formatElapsed(125_000), "2m 05s");
  assert.equal(formatElapsed(3_780_000), "1h 03m");
  assert.equal(formatElapsed(-5), "0s");
  const now = 1_700_000_000_000;
  assert.equal(formatAgo(now - 10_000, now), "just now");
  assert.equal(formatAgo(now - 5 * 60_000, now), "5 min ago");
  assert.equal(formatAgo(now - 3 * 3600_000, now), "3 h ago");
  assert.equal(formatAgo(now - 3 * 86400_000, now), "3 d ago");
  assert.equal(formatAgo(0, now), "");
  assert.equal(shorten("a\nb"), "a");
});

test("basename takes the last segment of either slash style, and nothing of a root", () => {
  assert.equal(basename("/src/app/foo.tsx"), "foo.tsx");
  assert.equal(basename("C:\\work\\notes.md"), "notes.md");
  assert.equal(basename("/p/app/"), "app");
  assert.equal(basename("/"), "");
  assert.equal(basename(undefined), "");
});
