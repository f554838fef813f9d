// The documented rollout fallback, used ONLY when a session_event has no `blocks`.
// It mirrors the seed's legacy raw-event.type rendering and must never grow new format
// knowledge: new shapes belong in the server-side projection, not here.

function legacyItem(item) {
  if (!item || typeof item !== "object") return null;
  switch (item.type) {
    case "text":
      return { kind: "text", text: String(item.text ?? "") };
    case "thinking":
      return { kind: "thinking", text: String(item.thinking ?? item.text ?? "") };
    case "tool_use":
      return { kind: "tool", toolUseId: item.id, name: item.name, input: item.input ?? {} };
    case "tool_result":
      return {
        kind: "tool_result",
        toolUseId: item.tool_use_id,
        isError: Boolean(item.is_error),
        text: typeof item.content === "string" ? item.content : undefined,
      };
    default:
      return null;
  }
}

/** Blocks derived from a blockless legacy event, or null when nothing renderable is found. */
export function legacyBlocks(event) {
  const content = event?.data?.message?.content;
  if (typeof content === "string") return [{ kind: "text", text: content }];
  if (Array.isArray(content)) {
    const blocks = content.map(legacyItem).filter(Boolean);
    return blocks.length ? blocks : null;
  }
  return null;
}
