// A small MCP server on the official TypeScript SDK (@modelcontextprotocol/sdk, pinned in
// package.json), used by Taskgate's interop tests to exercise the SDK's own 2025-11-25 task
// store: one InMemoryTaskStore shared by every session, which binds each task to the
// Mcp-Session-Id that created it (another session, or none, gets "task not found").
//
// Streamable HTTP on 127.0.0.1 only, path /mcp, one McpServer per session (the SDK connects
// one transport per server). An unknown Mcp-Session-Id gets the transport spec's HTTP 404.
// DELETE ends a session. PORT (default 0) picks the port; the bound address is reported on
// stderr as "TASKGATE_LISTENING 127.0.0.1 <port>".
//
// Tool "slow_job" (taskSupport required): arguments duration_ms (default 500), outcome
// ("completed" default, "failed" = isError result, "hang" = never ends, "input" = asks for
// approval by elicitation/create, queued with the task and delivered on tasks/result, and
// waits input_wait_ms for the answer, default 10 minutes; approved it completes with text,
// otherwise with an isError "Not approved: ACTION") and text. It takes the requested task
// ttl (default 10 minutes) and suggests a pollInterval of poll_ms (default 100 ms).
import { createServer } from "node:http";
import { randomUUID } from "node:crypto";
import { z } from "zod";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { InMemoryTaskStore, InMemoryTaskMessageQueue } from "@modelcontextprotocol/sdk/experimental/tasks";
import { ElicitResultSchema } from "@modelcontextprotocol/sdk/types.js";

const taskStore = new InMemoryTaskStore();
const taskMessageQueue = new InMemoryTaskMessageQueue();
const transports = new Map();
const counters = { toolCalls: 0 };

const SlowJob = z.object({
  duration_ms: z.number().int().min(0).optional(),
  poll_ms: z.number().int().min(10).optional(),
  outcome: z.enum(["completed", "failed", "hang", "input"]).optional(),
  text: z.string().optional(),
  input_message: z.string().optional(),
  input_wait_ms: z.number().int().min(1).optional(),
  idempotency_key: z.string().optional(),
});

function newServer() {
  const server = new McpServer(
    { name: "taskgate-sdk-task-server", version: "1.0.0" },
    {
      capabilities: { tools: {}, tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } },
      taskStore,
      taskMessageQueue,
    },
  );
  server.experimental.tasks.registerToolTask(
    "slow_job",
    {
      description: "Works for duration_ms in the background, then completes (or fails, or never ends).",
      inputSchema: SlowJob,
      execution: { taskSupport: "required" },
      annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    },
    {
      createTask: async (args, extra) => {
        counters.toolCalls++;
        const a = SlowJob.parse(args ?? {});
        const task = await extra.taskStore.createTask({
          ttl: extra.taskRequestedTtl ?? 600000,
          pollInterval: a.poll_ms ?? 100,
        });
        const outcome = a.outcome ?? "completed";
        if (outcome === "input") {
          askApproval(extra, task.taskId, a).catch((err) => process.stderr.write(`approval of ${task.taskId}: ${err}\n`));
        } else if (outcome !== "hang") {
          setTimeout(() => {
            const failed = outcome === "failed";
            extra.taskStore
              .storeTaskResult(task.taskId, failed ? "failed" : "completed", {
                content: [{ type: "text", text: a.text ?? (failed ? "job failed" : "job done") }],
                isError: failed,
              })
              .catch((err) => process.stderr.write(`store result of ${task.taskId}: ${err}\n`));
          }, a.duration_ms ?? 500);
        }
        return { task };
      },
      getTask: async (_args, extra) => extra.taskStore.getTask(extra.taskId),
      getTaskResult: async (_args, extra) => extra.taskStore.getTaskResult(extra.taskId),
    },
  );
  return server;
}

// askApproval asks for approval on the task's message queue (the SDK delivers it on the
// client's tasks/result stream) and completes the task with the answer.
async function askApproval(extra, taskId, a) {
  await extra.taskStore.updateTaskStatus(taskId, "input_required", "Waiting for approval");
  let action = "cancel";
  let approved = false;
  try {
    const r = await extra.sendRequest(
      {
        method: "elicitation/create",
        params: {
          mode: "form",
          message: a.input_message ?? "Approve slow_job?",
          requestedSchema: { type: "object", properties: { approve: { type: "boolean", title: "Approve" } }, required: ["approve"] },
        },
      },
      ElicitResultSchema,
      { relatedTask: { taskId }, timeout: a.input_wait_ms ?? 600000 },
    );
    action = r.action;
    approved = r.action === "accept" && r.content?.approve === true;
  } catch (err) {
    action = `no answer (${err?.message ?? err})`;
  }
  await extra.taskStore.updateTaskStatus(taskId, "working", "Answer received");
  await extra.taskStore.storeTaskResult(taskId, approved ? "completed" : "failed", {
    content: [{ type: "text", text: approved ? (a.text ?? "job approved and done") : `Not approved: ${action}` }],
    isError: !approved,
  });
}

async function readBody(req) {
  const chunks = [];
  let size = 0;
  for await (const c of req) {
    size += c.length;
    if (size > 1 << 20) throw new Error("body too large");
    chunks.push(c);
  }
  const raw = Buffer.concat(chunks).toString("utf8");
  return raw ? JSON.parse(raw) : undefined;
}

function jsonError(res, status, code, message) {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify({ jsonrpc: "2.0", error: { code, message }, id: null }));
}

const http = createServer(async (req, res) => {
  try {
    const url = new URL(req.url, "http://127.0.0.1");
    if (url.pathname === "/counters" && req.method === "GET") {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ toolCalls: counters.toolCalls, sessions: transports.size }));
      return;
    }
    if (url.pathname !== "/mcp") {
      res.writeHead(404).end();
      return;
    }
    const sid = req.headers["mcp-session-id"];
    const body = req.method === "POST" ? await readBody(req) : undefined;
    if (sid) {
      const transport = transports.get(sid);
      if (!transport) {
        jsonError(res, 404, -32001, "Session not found");
        return;
      }
      await transport.handleRequest(req, res, body);
      return;
    }
    if (req.method !== "POST" || !body || body.method !== "initialize") {
      jsonError(res, 400, -32000, "Bad Request: No valid session ID provided");
      return;
    }
    const server = newServer();
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => transports.set(id, transport),
    });
    transport.onclose = () => {
      if (transport.sessionId) transports.delete(transport.sessionId);
    };
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
  } catch (err) {
    process.stderr.write(`request failed: ${err}\n`);
    if (!res.headersSent) jsonError(res, 500, -32603, "Internal error");
  }
});

http.listen(Number(process.env.PORT || 0), "127.0.0.1", () => {
  const a = http.address();
  process.stderr.write(`TASKGATE_LISTENING ${a.address} ${a.port}\n`);
});
process.on("SIGTERM", () => process.exit(0));
