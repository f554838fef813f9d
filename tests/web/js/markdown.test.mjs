// Unit tests of the safe Markdown subset: the tree it builds, and that HTML stays text.
import assert from "node:assert/strict";
import test from "node:test";

import { looksLikeMarkdown, parseInline, parseMarkdown } from "../../../gateway/static/markdown.js";

const flat = (inl) =>
  inl.map((n) => (n.t === "text" || n.t === "code" ? `${n.t}:${n.text}` : `${n.t}[${flat(n.inl)}]`)).join("|");

test("strong, emphasis and inline code become typed spans", () => {
  assert.equal(flat(parseInline("It is **4** or *five*, see `x = 1`.")), "text:It is |strong[text:4]|text: or |em[text:five]|text:, see |code:x = 1|text:.");
  assert.equal(flat(parseInline("__bold__ and _it_")), "strong[text:bold]|text: and |em[text:it]");
});

test("snake_case, lone stars and unclosed marks stay literal", () => {
  assert.equal(flat(parseInline("snake_case_name and 2 * 3 * 4")), "text:snake_case_name and 2 * 3 * 4");
  assert.equal(flat(parseInline("**not closed")), "text:**not closed");
  assert.equal(flat(parseInline("`unclosed")), "text:`unclosed");
});

test("links are shown as text with their target, never as links", () => {
  assert.equal(flat(parseInline("see [the docs](https://example.com/x)")), "text:see the docs (https://example.com/x)");
  assert.equal(flat(parseInline("[x](javascript:alert)")), "text:x (javascript:alert)");
  assert.equal(flat(parseInline("[https://a.b/](https://a.b/)")), "text:https://a.b/");
});

test("HTML in the text is kept as literal text", () => {
  const blocks = parseMarkdown('<img src=x onerror="alert(1)"> **b**');
  assert.equal(blocks.length, 1);
  assert.equal(flat(blocks[0].inl), 'text:<img src=x onerror="alert(1)"> |strong[text:b]');
});

test("fenced code, lists, headings and paragraphs are blocks", () => {
  const md = "# Plan\n\nFirst:\n- one\n- **two**\n  continued\n\n1. a\n2. b\n\n```py\nprint('<b>')\n```\ntail";
  const blocks = parseMarkdown(md);
  assert.deepEqual(blocks.map((b) => b.t), ["h", "p", "ul", "ol", "code", "p"]);
  assert.equal(flat(blocks[2].items[1]), "strong[text:two]|text: |text:continued");
  assert.equal(blocks[3].start, 1);
  assert.equal(blocks[4].text, "print('<b>')");
  assert.equal(blocks[4].lang, "py");
});

test("an unclosed fence runs to the end; odd input never throws", () => {
  assert.equal(parseMarkdown("```\ncode").at(-1).text, "code");
  for (const x of [null, undefined, 42, "", "*", "**", "[", "[a](", "\\", "`"]) parseMarkdown(x);
});

test("plain text is recognised as such", () => {
  assert.equal(looksLikeMarkdown("Just a sentence."), false);
  assert.equal(looksLikeMarkdown("It is **4**"), true);
  assert.equal(looksLikeMarkdown("- item"), true);
});

test("pathological 16 KB blocks parse within 5x the time of a normal 16 KB block", () => {
  // Issue 22.10: `**x ` repeated took ~500 ms per block (every mark rescanned the rest).
  const size = 16 * 1024;
  const fill = (unit) => unit.repeat(Math.ceil(size / unit.length)).slice(0, size);
  const normal = fill("Some **bold** words, *emphasis* and `code` in a [link](https://x.example/a) sentence. ");
  const hostile = ["**x ", "*x ", "__x ", "[", "[a](", "``x `"].map(fill);
  const timed = (text) => {
    const t0 = performance.now();
    parseMarkdown(text);
    return performance.now() - t0;
  };
  const normalMs = [];
  const hostileMs = hostile.map(() => []);
  for (let round = 0; round < 9; round += 1) {
    // side by side in one run: each round measures every block once
    normalMs.push(timed(normal));
    hostile.forEach((text, k) => hostileMs[k].push(timed(text)));
  }
  const base = Math.min(...normalMs);
  hostileMs.forEach((ms, k) => {
    const ratio = Math.min(...ms) / base;
    assert.ok(ratio <= 5, `${JSON.stringify(hostile[k].slice(0, 8))}… took ${ratio.toFixed(1)}x a normal block`);
  });
});
