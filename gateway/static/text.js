// Pure plain-text formatting: file names, one-line cuts, byte sizes, durations and ages.

const MAX_LABEL = 72;

/** Last path segment of a file path (either slash style); "" for nothing. */
export function basename(path) {
  if (typeof path !== "string") return "";
  const trimmed = path.replace(/[\\/]+$/, "");
  const idx = Math.max(trimmed.lastIndexOf("/"), trimmed.lastIndexOf("\\"));
  return idx >= 0 ? trimmed.slice(idx + 1) : trimmed;
}

/** One line, at most `max` characters, with an ellipsis when cut. */
export function shorten(text, max = MAX_LABEL) {
  const line = String(text).split("\n").find((l) => l.trim() !== "") ?? "";
  const flat = line.trim().replace(/\s+/g, " ");
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** "1.2 KB" style sizes for image placeholders. */
export function formatBytes(n) {
  if (!Number.isFinite(n) || n < 0) return "unknown size";
  if (n < 1024) return `${n} B`;
  const units = ["KB", "MB", "GB"];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${v < 10 ? v.toFixed(1) : Math.round(v)} ${units[i]}`;
}

/** Elapsed time for the working indicator: "7s", "2m 05s", "1h 03m". */
export function formatElapsed(ms) {
  const total = Math.max(0, Math.floor((Number.isFinite(ms) ? ms : 0) / 1000));
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  if (h) return `${h}h ${String(m).padStart(2, "0")}m`;
  if (m) return `${m}m ${String(s).padStart(2, "0")}s`;
  return `${s}s`;
}

/** "just now", "5 min ago", "3 h ago", "2 d ago" relative to `now` (both epoch ms). */
export function formatAgo(ts, now) {
  if (!Number.isFinite(ts) || ts <= 0) return "";
  const sec = Math.max(0, Math.round((now - ts) / 1000));
  if (sec < 45) return "just now";
  const min = Math.round(sec / 60);
  if (min < 60) return `${min} min ago`;
  const h = Math.round(min / 60);
  if (h < 48) return `${h} h ago`;
  return `${Math.round(h / 24)} d ago`;
}
