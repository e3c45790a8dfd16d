// Drive a stdio MCP server with an official TypeScript SDK, run by the interop tier.
//
//   node ts_sdk_client.mjs --sdk v1|v2 --mode legacy|auto|2026-07-28 [--handshake-version V]
//        --plan PLAN.json --env ENV.json --cwd DIR -- SERVER_COMMAND [ARGS...]
//
// v1 is @modelcontextprotocol/sdk 1.x (legacy only), v2 is @modelcontextprotocol/client 2.x.
// The test copies this file into the folder that holds the SDK's node_modules, so that the
// packages resolve from there.  PLAN.json, ENV.json and the output are as for
// py_sdk_client.py: one JSON object a line on standard output (`connected`, `tools`, `call`,
// `hook`, `done`, or `error` and exit code 1); a hook waits for a line on standard input.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";

const argv = process.argv.slice(2);
const separator = argv.indexOf("--");
const options = {};
for (let i = 0; i < separator; i += 2) options[argv[i].replace(/^--/, "")] = argv[i + 1];
const [command, ...args] = argv.slice(separator + 1);
const plan = JSON.parse(readFileSync(options.plan, "utf8"));
const env = JSON.parse(readFileSync(options.env, "utf8"));

const emit = (fields) => process.stdout.write(JSON.stringify(fields) + "\n");

const lines = [];
const waiting = [];
createInterface({ input: process.stdin }).on("line", (line) => {
  if (waiting.length) waiting.shift()(line);
  else lines.push(line);
});
const nextLine = () => (lines.length ? Promise.resolve(lines.shift()) : new Promise((r) => waiting.push(r)));

let Client, StdioClientTransport;
const clientOptions = {};
if (options.sdk === "v1") {
  ({ Client } = await import("@modelcontextprotocol/sdk/client/index.js"));
  ({ StdioClientTransport } = await import("@modelcontextprotocol/sdk/client/stdio.js"));
  if (options.mode !== "legacy") throw new Error("SDK v1 speaks the legacy era only");
} else {
  ({ Client } = await import("@modelcontextprotocol/client"));
  ({ StdioClientTransport } = await import("@modelcontextprotocol/client/stdio"));
  const mode = options.mode === "legacy" || options.mode === "auto" ? options.mode : { pin: options.mode };
  clientOptions.versionNegotiation = { mode };
  // v2's own setting for the version `initialize` offers (the first handshake-era entry).
  if (options["handshake-version"]) clientOptions.supportedProtocolVersions = [options["handshake-version"]];
}

const transport = new StdioClientTransport({ command, args, env, cwd: options.cwd, stderr: "inherit" });
if (options.sdk === "v1" && options["handshake-version"]) {
  // v1 always offers its latest version and has no setting for it: rewrite the offer on the way out.
  const send = transport.send.bind(transport);
  transport.send = (message, sendOptions) => {
    if (message.method === "initialize") {
      message = { ...message, params: { ...message.params, protocolVersion: options["handshake-version"] } };
    }
    return send(message, sendOptions);
  };
}

const client = new Client({ name: `memprove-interop-ts-${options.sdk}`, version: "1.0.0" }, clientOptions);
const killer = setTimeout(() => {
  emit({ event: "error", type: "Timeout", message: "no end within the client's own time limit" });
  process.exit(124);
}, Number(options.timeout ?? 90000));
try {
  await client.connect(transport);
  const info = client.getServerVersion();
  const negotiated = typeof client.getNegotiatedProtocolVersion === "function"
    ? client.getNegotiatedProtocolVersion() : null;
  emit({ event: "connected", protocol_version: negotiated ?? null, server_name: info?.name ?? null });
  const listing = await client.listTools();
  emit({ event: "tools", tools: listing.tools });
  for (const step of plan) {
    if (step.hook) {
      emit({ event: "hook", name: step.hook });
      const answer = await nextLine();
      if (answer.trim() !== "continue") throw new Error(`the test did not let the hook continue: ${answer}`);
      continue;
    }
    const result = await client.callTool({ name: step.tool, arguments: step.args ?? {} });
    emit({ event: "call", tool: step.tool, result });
  }
  emit({ event: "done" });
} catch (error) {
  emit({ event: "error", type: error?.name ?? "Error", message: String(error?.message ?? error) });
  process.exitCode = 1;
} finally {
  clearTimeout(killer);
  await client.close().catch(() => {});
  process.stdin.destroy();
}
