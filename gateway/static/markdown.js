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

/** Inline spans: `code`, **strong**, *em* / _em_, [text](url) as "text (url)". */
export function parseInline(text, depth = 0) {
  const s = String(text ?? "");
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
      const run = /^`+/.exec(s.slice(i))[0];
      const end = s.indexOf(run, i + run.length);
      if (end > i) {
        push({ t: "code", text: s.slice(i + run.length, end).replace(/^ (.+) $/, "$1") });
        i = end + run.length;
        continue;
      }
      buf += run;
      i += run.length;
      continue;
    }
    if (depth < MAX_INLINE_DEPTH && (c === "*" || c === "_")) {
      const strong = s.startsWith(c + c, i);
      const mark = strong ? c + c : c;
      const from = i + mark.length;
      const end = closing(s, mark, from);
      const wordy = c === "_" && i > 0 && /\w/.test(s[i - 1]); // snake_case is not emphasis
      if (end > from && !wordy && !/\s/.test(s[from])) {
        push({ t: strong ? "strong" : "em", inl: parseInline(s.slice(from, end), depth + 1) });
        i = end + mark.length;
        continue;
      }
    }
    if (c === "[") {
      const m = /^\[([^\]\n]+)\]\(([^)\s]+)(?:\s+"[^"]*")?\)/.exec(s.slice(i));
      if (m) {
        const label = m[1];
        buf += label === m[2] ? label : `${label} (${m[2]})`;
        i += m[0].length;
        continue;
      }
    }
    buf += c;
    i += 1;
  }
  if (buf) out.push({ t: "text", text: buf });
  return out;
}

function closing(s, mark, from) {
  let k = from;
  while (k < s.length) {
    const at = s.indexOf(mark, k);
    if (at < 0) return -1;
    const single = mark.length === 1;
    const doubled = single && (s[at + 1] === mark || s[at - 1] === mark);
    if (!/\s/.test(s[at - 1] ?? " ") && !doubled) return at;
    k = at + mark.length;
  }
  return -1;
}

/** Does the text use any Markdown this renderer understands? (plain text stays one node) */
export function looksLikeMarkdown(text) {
  return /[`*_#]|^\s*(?:[-+]|\d+[.)])\s|\[[^\]]+\]\(/m.test(String(text ?? ""));
}
