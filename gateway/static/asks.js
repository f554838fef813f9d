// Pure: what Claude asks beyond yes/no (AskUserQuestion questions, the CLI's own "always
// allow" suggestions, plans) read from a permission_request, and the answers a card sends.

/** Longest free-text ("Other") answer sent; the rest is refused before it leaves. */
export const OTHER_MAX_CHARS = 1000;
/** Longest reason or "keep planning" note sent with reject_diff. */
export const REASON_MAX_CHARS = 2000;
const MAX_QUESTIONS = 8;
const MAX_OPTIONS = 12;
const MAX_SUGGESTIONS = 8;

const str = (v) => (typeof v === "string" ? v : "");

/**
 * The request's questions, bounded and cleaned: [{question, header, multiSelect, options:
 * [{label, description}]}]; questions without text and options without a label are left out.
 */
export function questionsOf(msg) {
  if (!Array.isArray(msg?.questions)) return [];
  const out = [];
  for (const q of msg.questions.slice(0, MAX_QUESTIONS)) {
    const question = str(q?.question);
    if (!question || out.some((o) => o.question === question)) continue;
    const options = (Array.isArray(q.options) ? q.options : [])
      .slice(0, MAX_OPTIONS)
      .filter((o) => str(o?.label))
      .map((o) => ({ label: o.label, description: str(o.description) }));
    out.push({ question, header: str(q.header), multiSelect: q.multiSelect === true, options });
  }
  return out;
}

/** The request's suggestions as [{index, text}], in the CLI's order (index into the frame's). */
export function suggestionsOf(msg) {
  if (!Array.isArray(msg?.suggestions)) return [];
  return msg.suggestions
    .slice(0, MAX_SUGGESTIONS)
    .map((s, index) => ({ index, text: str(s?.text) }))
    .filter((s) => s.text);
}

/**
 * The answers a question card sends, from its draft `{[question]: {picked: string[], other:
 * string, otherOn: boolean}}`: a label, a list of labels (multiSelect), or the free text.
 * `complete` is false while a question has no answer (or an "Other" without text).
 */
export function buildAnswers(questions, draft) {
  const answers = {};
  let complete = questions.length > 0;
  for (const q of questions) {
    const d = draft?.[q.question] ?? {};
    const other = str(d.other).trim().slice(0, OTHER_MAX_CHARS);
    const known = new Set(q.options.map((o) => o.label));
    const picked = q.options.map((o) => o.label).filter((l) => (d.picked ?? []).includes(l) && known.has(l));
    if (d.otherOn) {
      if (other) answers[q.question] = other;
      else complete = false;
    } else if (q.multiSelect && picked.length) {
      answers[q.question] = picked;
    } else if (!q.multiSelect && picked.length) {
      answers[q.question] = picked[0];
    } else {
      complete = false;
    }
  }
  return { answers, complete };
}

/** Pick `label` (or "Other" when `label` is null) in a question's draft; returns the new draft. */
export function pick(q, d, label, on) {
  const cur = { picked: [...(d?.picked ?? [])], other: str(d?.other), otherOn: d?.otherOn === true };
  if (label === null) {
    // "Other" replaces the choices: the wire's free text is one string, never in a list.
    return on ? { ...cur, picked: [], otherOn: true } : { ...cur, otherOn: false };
  }
  if (!q.multiSelect) return on ? { ...cur, picked: [label], otherOn: false } : cur;
  const picked = on ? [...new Set([...cur.picked, label])] : cur.picked.filter((l) => l !== label);
  return { ...cur, picked, otherOn: on ? false : cur.otherOn };
}

/** A rule text ("Always allow `npm test *` in this project") as [{code, text}] pieces. */
export function codeSpans(text) {
  return str(text)
    .split("`")
    .map((part, i) => ({ code: i % 2 === 1, text: part }))
    .filter((p) => p.text);
}
