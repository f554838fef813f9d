// Unit tests of what Claude asks: questions read from a request, answers built from a card.
import assert from "node:assert/strict";
import test from "node:test";

import { buildAnswers, codeSpans, OTHER_MAX_CHARS, pick, questionsOf, suggestionsOf } from "../../../gateway/static/asks.js";

const DB = { question: "Which database?", header: "DB", multiSelect: false,
  options: [{ label: "Postgres", description: "server" }, { label: "SQLite" }] };
const CHECKS = { question: "Which checks?", header: "", multiSelect: true,
  options: [{ label: "Lint" }, { label: "Types" }, { label: "Tests" }] };

test("questions are cleaned and bounded: no text, no label or a repeated question is left out", () => {
  const qs = questionsOf({ questions: [DB, { question: "" }, DB, { question: "Q", options: [{ description: "x" }, 5] }, ...Array(20).fill(CHECKS)] });
  assert.deepEqual(qs.map((q) => q.question), ["Which database?", "Q", "Which checks?"]);
  assert.deepEqual(qs[0].options, [{ label: "Postgres", description: "server" }, { label: "SQLite", description: "" }]);
  assert.deepEqual(qs[1].options, []);
  assert.equal(qs[2].multiSelect, true);
  assert.deepEqual(questionsOf({}), []);
  assert.deepEqual(questionsOf({ questions: "nope" }), []);
});

test("suggestions keep their index in the CLI's order; one without text gets no button", () => {
  const s = suggestionsOf({ suggestions: [{ type: "addRules" }, { type: "addRules", text: "Always allow `ls`" }] });
  assert.deepEqual(s, [{ index: 1, text: "Always allow `ls`" }]);
  assert.deepEqual(suggestionsOf({ suggestions: null }), []);
});

test("answers: a label, labels in option order for multiSelect, or the trimmed free text", () => {
  let draft = {};
  draft[DB.question] = pick(DB, undefined, "SQLite", true);
  assert.equal(buildAnswers([DB, CHECKS], draft).complete, false, "the second question is open");
  draft[CHECKS.question] = pick(CHECKS, pick(CHECKS, undefined, "Tests", true), "Lint", true);
  assert.deepEqual(buildAnswers([DB, CHECKS], draft), {
    answers: { "Which database?": "SQLite", "Which checks?": ["Lint", "Tests"] },
    complete: true,
  });
  draft = { [DB.question]: { ...pick(DB, draft[DB.question], null, true), other: "  DuckDB  " } };
  assert.deepEqual(buildAnswers([DB], draft).answers, { "Which database?": "DuckDB" });
  draft[DB.question].other = "   ";
  assert.equal(buildAnswers([DB], draft).complete, false, "an empty Other is no answer");
  draft[DB.question].other = "x".repeat(OTHER_MAX_CHARS + 50);
  assert.equal(buildAnswers([DB], draft).answers["Which database?"].length, OTHER_MAX_CHARS);
  assert.equal(buildAnswers([], {}).complete, false);
});

test("Other replaces the choices and a choice replaces Other; unknown labels are never sent", () => {
  const withOther = pick(CHECKS, pick(CHECKS, undefined, "Lint", true), null, true);
  assert.deepEqual([withOther.picked, withOther.otherOn], [[], true]);
  const back = pick(CHECKS, withOther, "Types", true);
  assert.deepEqual([back.picked, back.otherOn], [["Types"], false]);
  assert.deepEqual(pick(DB, pick(DB, undefined, "Postgres", true), "SQLite", true).picked, ["SQLite"]);
  const forged = { [CHECKS.question]: { picked: ["Lint", "rm -rf"], otherOn: false } };
  assert.deepEqual(buildAnswers([CHECKS], forged).answers, { "Which checks?": ["Lint"] });
});

test("a rule's backticks become code pieces", () => {
  assert.deepEqual(codeSpans("Always allow `npm test *` in this project"), [
    { code: false, text: "Always allow " },
    { code: true, text: "npm test *" },
    { code: false, text: " in this project" },
  ]);
  assert.deepEqual(codeSpans(undefined), []);
});
