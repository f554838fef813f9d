// Pure: transcript lines that are outcomes, not messages — an interrupt, a rejected tool —
// told apart from the CLI's own wording so the chat shows them as what they are.

/** How the CLI opens the user line it writes when a turn is interrupted. */
const INTERRUPT_PREFIX = "[Request interrupted by user";
/** How the CLI opens a tool result when the person said no at its prompt. */
const CLI_REJECTED = "The user doesn't want to ";
const REJECTED_REASON = /the user said:\s*([\s\S]*)$/i;
const DENIED = new Set(["deny", "reject", "rejected"]);

const str = (v) => (typeof v === "string" ? v : "");

/** The interrupt notice for a user text block, or null when it is a real message. */
export function interruptNotice(text) {
  const t = str(text).trim();
  if (!t.startsWith(INTERRUPT_PREFIX) || !t.endsWith("]") || t.length > 80) return null;
  return t.includes("for tool use") ? "Interrupted while a tool was waiting" : "Interrupted";
}

/**
 * A tool result that is a rejection: {by, reason, stopped} or null. `perm` is the
 * permission item of the same tool use, if this client saw one ({decision, sent, reason}):
 * a hook's deny writes its reason as the result text, the terminal's "no" the CLI's words.
 */
export function rejectionOf(block, perm) {
  if (block?.isError !== true) return null;
  const text = str(block.text).trim();
  const cli = text.startsWith(CLI_REJECTED);
  const mine = perm?.sent?.decision === "reject";
  const denied = mine || DENIED.has(perm?.decision);
  if (!cli && !denied) return null;
  let reason = cli ? (REJECTED_REASON.exec(text)?.[1] ?? "").trim() : text;
  if (!reason && denied) reason = str(perm?.sent?.reason || perm?.message).trim();
  const by = mine ? "by you" : denied ? "from relaybus" : "in the terminal";
  return { by, reason, stopped: mine && perm.sent.interrupt === true };
}

/** "Rejected by you: not now" / "Rejected in the terminal" / "Rejected by you · Claude stopped". */
export function rejectionText(r) {
  const head = `Rejected ${r.by}${r.stopped ? " · Claude stopped" : ""}`;
  return r.reason ? `${head}: ${r.reason}` : head;
}
