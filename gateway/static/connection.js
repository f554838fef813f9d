// The WebSocket: connect, hello, reconnect with jittered backoff. It knows nothing about
// sessions; controller.js builds the hello (lastSeqId/epoch) and handles every message.

const BACKOFF_MS = [500, 1000, 2000, 4000, 8000, 15000];
export const CLOSE_UNAUTHORIZED = 4401;

export class Connection {
  /**
   * @param {{url: () => string, hello: () => object, afterHello?: () => object[],
   *          onMessage: (m: object) => void,
   *          onStatus: (s: {state: string, retryInMs?: number}) => void}} opts
   */
  constructor(opts) {
    this.opts = opts;
    this.ws = null;
    this.attempt = 0;
    this.timer = null;
    this.probe = null;
    this.stopped = true;
  }

  start() {
    this.stopped = false;
    if (!this.ws) this.open();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    clearTimeout(this.probe);
    this.timer = null;
    const ws = this.ws;
    this.ws = null;
    if (ws) ws.close(1000, "bye");
  }

  get connected() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }

  /** Reconnect now (network came back, user tapped retry) when waiting to reconnect. */
  retryNow() {
    if (this.stopped || this.ws) return;
    clearTimeout(this.timer);
    this.timer = null;
    this.open();
  }

  /**
   * After the device wakes or the network returns an open socket may be dead without a
   * close event (half-open TCP). Send `frame` (any request the server answers) and replace
   * the socket if nothing at all arrives within `timeoutMs`.
   */
  checkAlive(frame, timeoutMs = 5000) {
    if (this.stopped) return;
    if (!this.ws) {
      this.retryNow();
      return;
    }
    if (this.ws.readyState !== WebSocket.OPEN) return;
    const ws = this.ws;
    this.send(frame);
    clearTimeout(this.probe);
    this.probe = setTimeout(() => {
      if (this.ws !== ws) return;
      this.ws = null; // forget it: its events are ignored from now on
      ws.close();
      this.open();
    }, timeoutMs);
  }

  /** The server accepted us (welcome): reset the backoff. */
  markHealthy() {
    this.attempt = 0;
  }

  /** Send a frame; returns false when not connected. */
  send(frame) {
    if (!this.connected) return false;
    this.ws.send(JSON.stringify(frame));
    return true;
  }

  open() {
    this.opts.onStatus({ state: "connecting" });
    let ws;
    try {
      ws = new WebSocket(this.opts.url());
    } catch {
      this.schedule();
      return;
    }
    this.ws = ws;
    ws.onopen = () => {
      if (this.ws !== ws) return;
      ws.send(JSON.stringify(this.opts.hello()));
      // Frames the app wants sent with hello, without waiting for welcome (one round trip
      // less before the first paint); the server handles them in order after hello.
      for (const frame of this.opts.afterHello?.() ?? []) ws.send(JSON.stringify(frame));
      this.opts.onStatus({ state: "open" });
    };
    ws.onmessage = (e) => {
      if (this.ws !== ws) return;
      clearTimeout(this.probe);
      let msg;
      try {
        msg = JSON.parse(e.data);
      } catch {
        return; // not JSON: ignore, never crash
      }
      if (msg && typeof msg === "object") this.opts.onMessage(msg);
    };
    ws.onclose = (e) => {
      if (this.ws !== ws) return;
      this.ws = null;
      if (e.code === CLOSE_UNAUTHORIZED) {
        this.stopped = true;
        this.opts.onStatus({ state: "unauthorized" });
        return;
      }
      if (!this.stopped) this.schedule();
    };
  }

  schedule() {
    const base = BACKOFF_MS[Math.min(this.attempt, BACKOFF_MS.length - 1)];
    this.attempt += 1;
    const delay = Math.round(base * (0.8 + Math.random() * 0.4));
    this.opts.onStatus({ state: "waiting", retryInMs: delay });
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      if (!this.stopped) this.open();
    }, delay);
  }
}
