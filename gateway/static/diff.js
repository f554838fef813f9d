// Pure edit summaries: "Added 12 lines, removed 3 lines" and the rows of a coloured diff.

function lines(n) {
  return `${n} ${n === 1 ? "line" : "lines"}`;
}

/** "Added 12 lines, removed 3 lines" from edit.added / edit.removed. */
export function formatEditDelta(edit) {
  const added = Number.isFinite(edit?.added) ? edit.added : 0;
  const removed = Number.isFinite(edit?.removed) ? edit.removed : 0;
  if (added && removed) return `Added ${lines(added)}, removed ${lines(removed)}`;
  if (added) return `Added ${lines(added)}`;
  if (removed) return `Removed ${lines(removed)}`;
  return "No lines changed";
}

/**
 * Rows for a coloured diff of edit.hunks: a "hunk" header per hunk, then one row per
 * line with its kind ("add" | "del" | "ctx"), text without the prefix, and old/new numbers.
 */
export function diffRows(edit) {
  const rows = [];
  const hunks = Array.isArray(edit?.hunks) ? edit.hunks : [];
  let shift = 0; // new-file line offset accumulated by earlier hunks
  for (const hunk of hunks) {
    const start = Number.isFinite(hunk?.oldStart) ? hunk.oldStart : 1;
    // oldStart 0: the old side is empty (a created file); the new side starts at line 1.
    let oldNo = Math.max(start, 1);
    let newNo = Math.max(start, 1) + shift;
    const header = start === 0 ? "@@ new file" : `@@ line ${start}`;
    rows.push({ kind: "hunk", text: header, oldNo: null, newNo: null });
    for (const raw of Array.isArray(hunk?.lines) ? hunk.lines : []) {
      const line = String(raw);
      const sign = line.charAt(0);
      const text = sign === "+" || sign === "-" || sign === " " ? line.slice(1) : line;
      if (sign === "+") {
        rows.push({ kind: "add", text, oldNo: null, newNo: newNo++ });
        shift += 1;
      } else if (sign === "-") {
        rows.push({ kind: "del", text, oldNo: oldNo++, newNo: null });
        shift -= 1;
      } else {
        rows.push({ kind: "ctx", text, oldNo: oldNo++, newNo: newNo++ });
      }
    }
  }
  return rows;
}
