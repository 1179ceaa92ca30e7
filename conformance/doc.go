// Package conformance runs the official MCP conformance suites
// (@modelcontextprotocol/conformance 0.2.0-alpha.12 and 0.1.16, pinned in
// package.json and package-lock.json) against Taskgate's reference receiver
// and requestor as standing gates.
//
// TestOutsideSuites installs the suites with `npm ci` when missing,
// re-executes itself inside a network namespace that has only loopback
// (`unshare -n`, since the suites' mock servers listen on every interface),
// serves the receiver with its conformance profile on 127.0.0.1, and runs
// `server --requirements 2026-07-28` in extension mode and `server --suite
// active` of both releases in legacy mode, each under its own deadline that
// kills the suite's whole process group. Every failing check must be listed
// in expected-failures.txt with its reason; a new failure, a listed check
// that passes again, a scenario with 0 checks, or a run with no results fails
// the test. --spec-version is never passed: the pre-release skips
// [extension] scenarios under it and still exits 0.
package conformance
