// A stdio MCP server on mcp-framework 0.2.22 (pinned in package.json), with
// its task support on: the tolerant-requestor test's sloppy peer.
import { MCPServer, MCPTool } from "mcp-framework";
import { z } from "zod";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const executions = {};
const count = (name) => { executions[name] = (executions[name] ?? 0) + 1; };

class Report extends MCPTool {
  name = "report";
  description = "Builds a report after a short wait.";
  execution = { taskSupport: "optional" };
  useStringify = false;
  schema = z.object({ topic: z.string().describe("What to report on") });
  async execute(input) {
    count(this.name);
    await sleep(300);
    return `report on ${input.topic} ready`;
  }
}

class Failing extends MCPTool {
  name = "failing";
  description = "Always fails with a tool error.";
  execution = { taskSupport: "optional" };
  useStringify = false;
  schema = z.object({});
  async execute() {
    count(this.name);
    await sleep(100);
    throw new Error("the report could not be built");
  }
}

class RequiredOnly extends MCPTool {
  name = "required_only";
  description = "Declared task-required.";
  execution = { taskSupport: "required" };
  useStringify = false;
  schema = z.object({});
  async execute() {
    count(this.name);
    return "ran without a task";
  }
}

class Executions extends MCPTool {
  name = "executions";
  description = "How many times each tool ran, as JSON.";
  useStringify = false;
  schema = z.object({});
  async execute() {
    return JSON.stringify(executions);
  }
}

const server = new MCPServer({
  name: "mcp-framework-peer",
  version: "0.2.22",
  basePath: new URL(".", import.meta.url).pathname,
  transport: { type: "stdio" },
  tasks: { enabled: true, defaultTtl: 60000, defaultPollInterval: 200 },
});
server.addTool(Report);
server.addTool(Failing);
server.addTool(RequiredOnly);
server.addTool(Executions);
await server.start();
