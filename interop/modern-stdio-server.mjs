// A 2026-07-28-only stdio server on @modelcontextprotocol/server 2.4.0 (the
// v2 TypeScript SDK, pinned in package.json) without the tasks extension:
// initialize is refused, one plain tool is served.
import { McpServer } from "@modelcontextprotocol/server";
import { serveStdio } from "@modelcontextprotocol/server/stdio";
import { z } from "zod";

serveStdio(() => {
  const server = new McpServer({ name: "modern-only-sdk", version: "2.4.0" }, { capabilities: { tools: {} } });
  server.registerTool(
    "echo",
    { description: "Echoes its text.", inputSchema: z.object({ text: z.string() }) },
    async ({ text }) => ({ content: [{ type: "text", text: `echo: ${text}` }] }),
  );
  return server;
}, { legacy: "reject" });
