// Package interop holds the MCP peers nobody at Taskgate wrote, pinned with
// npm (package.json and package-lock.json here, and in mcp-framework/ for
// the peer that needs zod 3), and the tests that run Taskgate's requestor
// against the sloppier ones.
package interop
