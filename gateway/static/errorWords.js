// Plain words for the protocol's error codes (OPEN union: unknown codes still read well).

const ERROR_WORDS = {
  not_implemented: "This server can't do that yet.",
  prompts_disabled: "That machine doesn't take prompts or Stop from relaybus (turned off there).",
  host_offline: "That machine is offline right now.",
  busy: "Claude is busy with another turn; try again when it's done.",
  forbidden: "Your token isn't allowed to do that.",
  unauthorized: "That token was not accepted.",
  unknown_session: "That session no longer exists.",
  timeout: "The machine didn't answer in time.",
  interrupt_unavailable: "Stopping isn't supported for this session.",
  no_active_turn: "There was nothing to stop.",
  bridge_error: "The machine couldn't carry that out.",
  rate_limited: "Too many requests; slow down a little.",
  expired: "That request has expired.",
  unavailable: "The server's storage is unavailable; try again in a moment.",
  cwd_not_allowed: "That machine doesn't allow prompts in this folder.",
  cwd_not_found: "The session's folder no longer exists on that machine.",
  unknown_outcome: "The machine lost track of that request; check the session before retrying.",
  host_required: "Say which machine should run it.",
  invalid_message: "That message can't be sent (empty or too long).",
  invalid_field: "The request was malformed.",
  ambiguous: "Several requests are waiting; answer one of them.",
  already_resolved: "Someone already answered that request.",
  no_pending_request: "There is no request waiting for an answer.",
  bad_json: "The app sent something the server couldn't read.",
  not_object: "The app sent something the server couldn't read.",
  unknown_type: "This server doesn't know that request.",
  frame_too_large: "That request is too large to send.",
  bad_state: "The app and the server got out of step; reload the page.",
  prompt_failed: "Claude Code couldn't run that prompt",
  not_controllable: "That session runs in a terminal relaybus can't type into (not in tmux).",
  transcript_missing: "That conversation's transcript is gone from its machine; start a new conversation.",
  mode_unavailable: "Claude Code can't be switched to that mode from here",
};

// Codes whose message is the reason worth showing (prompt_failed: the CLI's own words;
// mode_unavailable: the modes the CLI cycled through).
const WITH_REASON = new Set(["prompt_failed", "mode_unavailable"]);

/** Every code with plain words (for tests and docs). */
export const KNOWN_ERROR_CODES = Object.freeze(Object.keys(ERROR_WORDS));

/** A plain-words explanation of an error code (OPEN union: unknown codes still read well). */
export function errorText(code, message) {
  const detail = typeof message === "string" && message ? `: ${message}` : "";
  if (typeof code === "string" && ERROR_WORDS[code]) {
    return WITH_REASON.has(code) ? `${ERROR_WORDS[code]}${detail || "."}` : ERROR_WORDS[code];
  }
  return `Something went wrong (${code || "error"})${detail}`;
}
