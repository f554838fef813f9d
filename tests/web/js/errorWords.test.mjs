// Unit tests of the plain words for error codes.
import assert from "node:assert/strict";
import test from "node:test";

import { errorText } from "../../../gateway/static/errorWords.js";

test("error codes are explained in plain words; unknown codes still read well", () => {
  for (const code of ["not_implemented", "prompts_disabled", "host_offline", "busy", "forbidden"]) {
    assert.doesNotMatch(errorText(code), /Something went wrong|_/, code);
  }
  assert.match(errorText("prompts_disabled"), /turned off/);
  assert.equal(errorText("weird_new_code", "detail"), "Something went wrong (weird_new_code): detail");
});
