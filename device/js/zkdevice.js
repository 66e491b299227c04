// zkdevice.js: a zkagent device for browsers and web views, on the platform's own WebSocket.
// It implements docs/device-protocol.md: connect to any agent with `redirect=close` (a browser
// cannot follow an HTTP redirect on a WebSocket), follow the 4001 close to the leader, heartbeat
// with ping/pong, notice a silent agent, reconnect with full-jitter backoff, and ask for a fresh
// token when the agent says it expired (4003) or a connection failed before its welcome (a
// browser cannot see a 401). It adopts the welcome's heartbeat_ms, the agent's own setting.
//
//   const device = new ZkDevice({
//     endpoints: ["ws://agent-a:8471", "ws://agent-b:8471"],
//     account: "acct-1", device: "phone-7",
//     tokenProvider: async (refresh) => fetchTokenFromAccountSystem(refresh),  // optional
//     onEvent: (event) => console.log(event),  // {type: "connected"|"redirected"|"disconnected", ...}
//   });
//   device.start();  ...  device.stop();
//
// A classic script (sets globalThis.ZkDevice) that is also a CommonJS module, so that a page can
// load it with <script src> and Node can require it with a WebSocket implementation passed in.
(function (root) {
  "use strict";

  const CLOSE_LEADER_MOVED = 4001;  // reason: the leader's device URL (or empty: unknown)
  const CLOSE_TOKEN_EXPIRED = 4003;
  const CLOSE_TRY_AGAIN_LATER = 1013;
  const MAX_REDIRECTS_IN_A_ROW = 3;  // as the reference client (device/src/client.cpp)

  class ZkDevice {
    constructor(options) {
      const o = Object.assign(
          {
            heartbeatMs: 30000,       // until the welcome says the agent's own
            timeoutMs: undefined,     // silence after which the agent counts as gone (2.5 x heartbeat)
            backoffInitialMs: 200,
            backoffMaxMs: 30000,
            connectTimeoutMs: 5000,   // open + welcome
            tokenProvider: null,
            onEvent: () => {},
            WebSocket: root.WebSocket,
            random: Math.random,
          },
          options);
      const id = /^[A-Za-z0-9_.-]{1,128}$/;
      for (const field of ["account", "device"]) {
        if (!id.test(o[field] || "") || o[field] === "." || o[field] === "..") {
          throw new Error(field + ": must match [A-Za-z0-9_.-]{1,128}, not . or ..");
        }
      }
      if (!Array.isArray(o.endpoints) || o.endpoints.length === 0) {
        throw new Error("endpoints: at least one ws:// or wss:// URL");
      }
      for (const url of o.endpoints) ZkDevice.origin(url);  // throws for a bad one
      if (o.timeoutMs === undefined) o.timeoutMs = Math.floor(o.heartbeatMs * 5 / 2);
      this.o = o;
      this.ws = null;
      this.timer = null;
      this.silence = null;
      this.running = false;
      this.next = 0;              // index into endpoints for the next plain attempt
      this.redirectTo = null;     // origin the last 4001 named
      this.redirects = 0;
      this.failures = 0;          // attempts since the last welcome
      this.refreshToken = false;
      this.welcome = null;
      this.seq = 0;
    }

    // "ws://host:port" of a ws:// or wss:// URL (path and query dropped: the device builds its own).
    static origin(url) {
      const parsed = new URL(url);
      if (parsed.protocol !== "ws:" && parsed.protocol !== "wss:") {
        throw new Error("endpoint " + url + ": must be ws:// or wss://");
      }
      return parsed.protocol + "//" + parsed.host;
    }

    start() {
      if (this.running) return;
      this.running = true;
      this.connect();
    }

    // Closes with 1000 and does not reconnect.
    stop() {
      this.running = false;
      this.clearTimers();
      if (this.ws) this.ws.close(1000, "device leaving");
      this.ws = null;
    }

    // The connection's epoch after a welcome: {agent, token, counter}; null while not connected.
    get connected() { return this.welcome; }

    clearTimers() {
      clearTimeout(this.timer);
      clearTimeout(this.silence);
      this.timer = this.silence = null;
    }

    emit(event) {
      try { this.o.onEvent(event); } catch (e) { /* the application's problem, not ours */ }
    }

    async connect() {
      if (!this.running) return;
      let origin;
      if (this.redirectTo) {
        origin = this.redirectTo;
        this.redirectTo = null;
      } else {
        origin = ZkDevice.origin(this.o.endpoints[this.next % this.o.endpoints.length]);
        this.next++;
      }
      const query = new URLSearchParams({account: this.o.account, device: this.o.device,
                                         redirect: "close"});
      if (this.o.tokenProvider) {
        let token;
        try {
          token = await this.o.tokenProvider(this.refreshToken);
        } catch (e) {
          return this.retry("token_unavailable: " + (e && e.message ? e.message : e));
        }
        this.refreshToken = false;
        if (!this.running) return;
        if (token) query.set("token", token);
      }
      let ws;
      try {
        ws = new this.o.WebSocket(origin + "/v1/devices?" + query.toString());
      } catch (e) {
        return this.retry("connect_failed: " + e.message);
      }
      this.ws = ws;
      this.welcome = null;
      let closedFirst = false;
      this.timer = setTimeout(() => {
        if (this.ws === ws && !this.welcome) {
          closedFirst = true;
          this.abandon(ws, "connect_timeout");
        }
      }, this.o.connectTimeoutMs);
      ws.onmessage = (message) => { if (this.ws === ws) this.onFrame(ws, message.data); };
      ws.onclose = (close) => {
        if (this.ws !== ws || closedFirst) return;
        this.onClose(close.code, close.reason || "");
      };
      ws.onerror = () => {};  // always followed by onclose
    }

    onFrame(ws, data) {
      let frame;
      try {
        frame = JSON.parse(data);
      } catch (e) {
        return this.abandon(ws, "bad_frame: not JSON");
      }
      this.armSilence(ws);
      if (frame.type === "welcome") {
        if (typeof frame.agent !== "string" || !Number.isInteger(frame.token) ||
            !Number.isInteger(frame.counter)) {
          return this.abandon(ws, "bad_frame: welcome needs agent, token and counter");
        }
        clearTimeout(this.timer);
        this.welcome = {agent: frame.agent, token: frame.token, counter: frame.counter,
                        url: ws.url};
        if (Number.isInteger(frame.heartbeat_ms) && frame.heartbeat_ms > 0) {
          this.o.heartbeatMs = frame.heartbeat_ms;
        }
        this.failures = 0;
        this.redirects = 0;
        this.emit(Object.assign({type: "connected"}, this.welcome));
        this.schedulePing(ws);
      } else if (frame.type === "pong") {
        this.emit({type: "pong", seq: frame.seq});
      }  // other types are ignored, so that an agent may add frames
    }

    // Every heartbeat x U[0.9, 1.0], so a fleet started together does not ping together.
    schedulePing(ws) {
      if (this.o.heartbeatMs <= 0) return;
      const delay = this.o.heartbeatMs * (0.9 + 0.1 * this.o.random());
      this.timer = setTimeout(() => {
        if (this.ws !== ws || ws.readyState !== 1) return;
        ws.send(JSON.stringify({type: "ping", seq: ++this.seq}));
        this.schedulePing(ws);
      }, delay);
    }

    armSilence(ws) {
      clearTimeout(this.silence);
      if (this.o.timeoutMs <= 0) return;
      this.silence = setTimeout(() => {
        if (this.ws === ws) this.abandon(ws, "agent_timeout");
      }, this.o.timeoutMs);
    }

    // Gives up on `ws` (closing it) and reconnects after the backoff.
    abandon(ws, reason) {
      this.ws = null;
      try { ws.close(1000); } catch (e) { /* already closing */ }
      this.retry(reason);
    }

    onClose(code, reason) {
      this.ws = null;
      const wasConnected = this.welcome !== null;
      this.welcome = null;
      this.clearTimers();
      if (!this.running) return;
      if (code === CLOSE_LEADER_MOVED && reason && this.redirects < MAX_REDIRECTS_IN_A_ROW) {
        let origin = null;
        try { origin = ZkDevice.origin(reason); } catch (e) { /* not a URL: plain retry */ }
        if (origin) {
          this.redirects++;
          this.redirectTo = origin;
          this.emit({type: "redirected", to: origin, code});
          // An in-band redirect before the welcome: at once, the agent said where to go. A leader
          // change on an open connection: after U[0, backoffInitialMs], so that the deposed
          // leader's devices do not all reach the successor in the same millisecond.
          if (!wasConnected) return this.connect();
          this.emit({type: "disconnected", reason: "leader_moved", code, connected: true});
          this.timer = setTimeout(() => this.connect(), this.o.random() * this.o.backoffInitialMs);
          return;
        }
      }
      if (code === CLOSE_TOKEN_EXPIRED) this.refreshToken = true;
      // A browser cannot see why an upgrade failed (1006): it may have been a refused token.
      if (!wasConnected && code === 1006) this.refreshToken = true;
      const why = code === CLOSE_TRY_AGAIN_LATER ? "no_leader" : "closed";
      this.retry(why + ":" + code + (reason ? " " + reason : ""), wasConnected);
    }

    // Full jitter: U[0, min(max, initial x 2^failures)].
    retry(reason, wasConnected) {
      this.clearTimers();
      this.emit({type: "disconnected", reason, connected: !!wasConnected});
      if (!this.running) return;
      const cap = Math.min(this.o.backoffMaxMs,
                           this.o.backoffInitialMs * Math.pow(2, Math.min(this.failures, 30)));
      this.failures++;
      this.timer = setTimeout(() => this.connect(), this.o.random() * cap);
    }
  }

  ZkDevice.CLOSE_LEADER_MOVED = CLOSE_LEADER_MOVED;
  ZkDevice.CLOSE_TOKEN_EXPIRED = CLOSE_TOKEN_EXPIRED;
  ZkDevice.CLOSE_TRY_AGAIN_LATER = CLOSE_TRY_AGAIN_LATER;
  root.ZkDevice = ZkDevice;
  if (typeof module !== "undefined" && module.exports) module.exports = ZkDevice;
})(typeof globalThis !== "undefined" ? globalThis : this);
