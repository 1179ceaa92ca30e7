// Preloaded with `node --require ./loopback.cjs` by the mcpclient interop
// tests. server-everything calls app.listen(PORT) without a host, which binds
// every interface; it reads no HOST variable. This forces every net.Server
// listen that names no host onto 127.0.0.1 and reports the bound port on
// stderr as "TASKGATE_LISTENING <port>" (tests start it with PORT=0).
"use strict";
const net = require("node:net");
const original = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (args.length > 0 && (typeof args[0] === "number" || typeof args[0] === "string") &&
      (args.length === 1 || typeof args[1] === "function")) {
    args.splice(1, 0, "127.0.0.1");
  } else if (args.length > 0 && typeof args[0] === "object" && args[0] !== null && !args[0].host && !args[0].path) {
    args[0] = { ...args[0], host: "127.0.0.1" };
  }
  this.once("listening", () => {
    const addr = this.address();
    if (addr && typeof addr === "object") {
      process.stderr.write(`TASKGATE_LISTENING ${addr.address} ${addr.port}\n`);
    }
  });
  return original.apply(this, args);
};
