// Short unique ids for the requestId / traceId of outgoing frames.

let counter = 0;

/** A fresh id: `prefix`, the time, a counter and a little randomness. */
export function newId(prefix) {
  counter += 1;
  return `${prefix}-${Date.now().toString(36)}-${counter.toString(36)}${Math.random().toString(36).slice(2, 6)}`;
}
