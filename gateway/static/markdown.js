// A safe Markdown subset for assistant text: paragraphs, headings (as bold lines), fenced
// and inline code, bullet and numbered lists, **strong**, *emphasis*, links shown as text.
// Pure: text in, a small tree out (no DOM, no HTML strings); render.js builds the DOM with
// text nodes only, so nothing from a transcript is ever parsed as HTML.
//
// Block nodes: {t: "p"|"h", inl}, {t: "code", text, lang}, {t: "ul"|"ol", items: [inl], start}
// Inline nodes: {t: "text"|"code", text}, {t: "strong"|"em", inl}

const FENCE = /^\s{0,3}(```+|~~~+)\s*([\w+.-]*)\s*$/;
const BULLET = /^\s{0,3}[-*+]\s+(.*)$/;
const ORDERED = /^\s{0,3}(\d{1,9})[.)]\s+(.*)$/;
const HEADING = /^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$/;
const MAX_INLINE_DEPTH = 4;

/** Parse Markdown text into block nodes (never throws, any input). */
export function parseMarkdown(text) {
  const lines = String(text ?? "").replace(/\r\n?/g, "\n").split("\n");
  const out = [];
  let para = [];
  let list = null;
  const flushPara = () => {
    if (para.length) out.push({ t: "p", inl: parseInline(para.join("\n")) });
    para = [];
  };
  const flushList = () => {
    if (list) out.push(list);
    list = null;
  };
  for (let i = 0; i < lines.length; i += 1) {
    const line = lines[i];
    const fence = FENCE.exec(line);
    if (fence) {
      flushPara();
      flushList();
      const body = [];
      let j = i + 1;
      while (j < lines.length && !lines[j].trim().startsWith(fence[1])) body.push(lines[j++]);
      out.push({ t: "code", text: body.join("\n"), lang: fence[2] || "" });
      i = j; // the closing fence (or the end)
      continue;
    }
    const bullet = BULLET.exec(line);
    const ordered = bullet ? null : ORDERED.exec(line);
    if (bullet || ordered) {
      flushPara();
      const kind = bullet ? "ul" : "ol";
      if (!list || list.t !== kind) {
        flushList();
        list = { t: kind, items: [], start: ordered ? Number(ordered[1]) : 1 };
      }
      list.items.push(parseInline(bullet ? bullet[1] : ordered[2]));
      continue;
    }
    if (list && /^\s{2,}\S/.test(line)) {
      // a continuation line of the last list item
      const last = list.items.at(-1);
      last.push({ t: "text", text: " " }, ...parseInline(line.trim()));
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      flushPara();
      flushList();
      out.push({ t: "h", inl: parseInline(heading[1]) });
      continue;
    }
    if (!line.trim()) {
      flushPara();
      flushList();
      continue;
    }
    flushList();
    para.push(line);
  }
  flushPara();
  flushList();
  return out;
}

/**
 * Inline spans: `code`, **strong**, *em* / _em_, [text](url) as "text (url)". Linear in the
 * text's length (per nesting level): every "where does this end" question is answered from a
 * table built once per call, so no input (16 KB of `**x `, `[[[…`) rescans the rest of the text
 * for each mark.
 */
export function parseInline(text, depth = 0) {
  const s = String(text ?? "");
  const ends = new Ends(s);
  const out = [];
  let buf = "";
  const push = (node) => {
    if (buf) out.push({ t: "text", text: buf });
    buf = "";
    out.push(node);
  };
  let i = 0;
  while (i < s.length) {
    const c = s[i];
    if (c === "\\" && i + 1 < s.length && /[\\`*_[\]()#+\-.!]/.test(s[i + 1])) {
      buf += s[i + 1];
      i += 2;
      continue;
    }
    if (c === "`") {
      let len = 1;
      while (s[i + len] === "`") len += 1;
      const run = "`".repeat(len);
      const end = ends.code(run, i + len);
      if (end > i) {
        push({ t: "code", text: s.slice(i + len, end).replace(/^ (.+) $/, "$1") });
        i = end + len;
        continue;
      }
      buf += run;
      i += len;
      continue;
    }
    if (depth < MAX_INLINE_DEPTH && (c === "*" || c === "_")) {
      const strong = s.startsWith(c + c, i);
      const mark = strong ? c + c : c;
      const from = i + mark.length;
      const end = ends.closing(mark, from);
      const wordy = c === "_" && i > 0 && /\w/.test(s[i - 1]); // snake_case is not emphasis
      if (end > from && !wordy && !/\s/.test(s[from])) {
        push({ t: strong ? "strong" : "em", inl: parseInline(s.slice(from, end), depth + 1) });
        i = end + mark.length;
        continue;
      }
    }
    if (c === "[") {
      const link = ends.link(i);
      if (link) {
        const [label, url, end] = link;
        buf += label === url ? label : `${label} (${url})`;
        i = end;
        continue;
      }
    }
    buf += c;
    i += 1;
  }
  if (buf) out.push({ t: "text", text: buf });
  return out;
}

const LINK_TITLE = /\s+"[^"]*"\)/y;

/** Where marks, code runs and links of one text end; each table is built once, on first use. */
class Ends {
  constructor(s) {
    this.s = s;
    this.tables = new Map();
    this.codeRuns = new Map();
  }

  /** `at[k]`: the first index >= k whose character passes `test` (s.length if none). */
  next(key, test) {
    let at = this.tables.get(key);
    if (!at) {
      const n = this.s.length;
      at = new Int32Array(n + 2).fill(n);
      for (let k = n - 1; k >= 0; k -= 1) at[k] = test(this.s[k]) ? k : at[k + 1];
      this.tables.set(key, at);
    }
    return at;
  }

  /**
   * The first closing `mark` at or after `from` (-1 if none): not preceded by whitespace and,
   * for a single mark, not part of a double one. Scanning from k, an unusable mark is
   * skipped whole, so the answer for k follows from the answer for a later index.
   */
  closing(mark, from) {
    let at = this.tables.get(mark);
    if (!at) {
      const s = this.s;
      const n = s.length;
      const single = mark.length === 1;
      at = new Int32Array(n + 3).fill(-1);
      for (let k = n - 1; k >= 0; k -= 1) {
        if (!s.startsWith(mark, k)) at[k] = at[k + 1];
        else {
          const doubled = single && (s[k + 1] === mark || s[k - 1] === mark);
          at[k] = !/\s/.test(s[k - 1] ?? " ") && !doubled ? k : at[k + mark.length];
        }
      }
      this.tables.set(mark, at);
    }
    return from < this.s.length ? at[from] : -1;
  }

  /** `s.indexOf(run, from)`, remembering the last answer per run so no stretch is searched twice. */
  code(run, from) {
    const seen = this.codeRuns.get(run);
    if (seen && seen[0] <= from && (seen[1] < 0 || seen[1] >= from)) return seen[1];
    const at = this.s.indexOf(run, from);
    this.codeRuns.set(run, [from, at]);
    return at;
  }

  /** `[label](url "title")` starting at `i`: [label, url, index after it], or null. */
  link(i) {
    const s = this.s;
    const close = this.next("]", (ch) => ch === "]" || ch === "\n")[i + 1];
    if (close <= i + 1 || s[close] !== "]" || s[close + 1] !== "(") return null;
    const urlEnd = this.next(")", (ch) => ch === ")" || /\s/.test(ch))[close + 2];
    if (urlEnd <= close + 2 || urlEnd >= s.length) return null;
    let end = urlEnd + 1;
    if (s[urlEnd] !== ")") {
      LINK_TITLE.lastIndex = urlEnd;
      const m = LINK_TITLE.exec(s);
      if (!m) return null;
      end = urlEnd + m[0].length;
    }
    return [s.slice(i + 1, close), s.slice(close + 2, urlEnd), end];
  }
}

/** Does the text use any Markdown this renderer understands? (plain text stays one node) */
export function looksLikeMarkdown(text) {
  return /[`*_#]|^\s*(?:[-+]|\d+[.)])\s|\[[^\]]+\]\(/m.test(String(text ?? ""));
}
