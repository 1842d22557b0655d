// The AI SDK's chat (`ai`'s AbstractChat, what `useChat` runs, with its
// DefaultChatTransport) against `serve`'s `/ai-sdk/{name}`: run by
// tests/frontends.rs with the server's address as its argument.
//
// The chat reads the stream as `useChat` does (it fails on a chunk out of place or
// a part it cannot find) and assembles the messages; every chunk is also read raw
// here, and checked to be of a type the protocol names, with only the fields the
// protocol's type gives it. Prints what the chat saw as JSON, for the Rust test.

import { AbstractChat, DefaultChatTransport } from "ai";

const base = process.argv[2];
if (!base) throw new Error("usage: node ai_sdk_client.mjs http://HOST:PORT");

// The fields of each chunk type this server may send (from `ai`'s UIMessageChunk).
const FIELDS = {
  start: ["messageId", "messageMetadata"],
  finish: ["finishReason", "messageMetadata"],
  "start-step": [],
  "finish-step": [],
  error: ["errorText"],
  "text-start": ["id", "providerMetadata"],
  "text-delta": ["id", "delta", "providerMetadata"],
  "text-end": ["id", "providerMetadata"],
  "reasoning-start": ["id", "providerMetadata"],
  "reasoning-delta": ["id", "delta", "providerMetadata"],
  "reasoning-end": ["id", "providerMetadata"],
  "tool-input-start": ["toolCallId", "toolName", "providerExecuted", "dynamic"],
  "tool-input-delta": ["toolCallId", "inputTextDelta"],
  "tool-input-available": ["toolCallId", "toolName", "input", "providerExecuted", "dynamic"],
  "tool-input-error": ["toolCallId", "toolName", "input", "errorText", "providerExecuted", "dynamic"],
  "tool-approval-request": ["approvalId", "toolCallId", "reason"],
  "tool-output-available": ["toolCallId", "output", "providerExecuted", "dynamic"],
  "tool-output-error": ["toolCallId", "errorText", "providerExecuted", "dynamic"],
  "tool-output-denied": ["toolCallId"],
};

const objections = [];
const chunks = [];

/// Reads a response body's Server-Sent Events, checking each chunk.
async function collect(body, headers) {
  if (headers.get("x-vercel-ai-ui-message-stream") !== "v1") objections.push("no x-vercel-ai-ui-message-stream: v1");
  const text = await new Response(body).text();
  for (const line of text.split("\n")) {
    if (!line.startsWith("data: ")) continue;
    const data = line.slice(6);
    if (data === "[DONE]") {
      chunks.push("[DONE]");
      continue;
    }
    const chunk = JSON.parse(data);
    const fields = FIELDS[chunk.type];
    if (!fields) objections.push(`a chunk of unknown type: ${data}`);
    else {
      const extra = Object.keys(chunk).filter((k) => k !== "type" && !fields.includes(k));
      if (extra.length) objections.push(`${chunk.type} carries ${extra.join(", ")}`);
    }
    chunks.push(chunk.type);
  }
}

/// A fetch that hands the chat the response and reads a copy of it.
const seen = [];
async function teeFetch(url, init) {
  const response = await fetch(url, init);
  if (!response.body) return response;
  const [chat, mine] = response.body.tee();
  seen.push(collect(mine, response.headers));
  return new Response(chat, { status: response.status, headers: response.headers });
}

/// The chat's state, kept in memory (what `useChat` keeps in React state).
class MemoryState {
  constructor() {
    this.status = "ready";
    this.error = undefined;
    this.messages = [];
  }
  pushMessage(message) {
    this.messages = [...this.messages, message];
  }
  popMessage() {
    this.messages = this.messages.slice(0, -1);
  }
  replaceMessage(index, message) {
    this.messages = this.messages.map((m, i) => (i === index ? message : m));
  }
  snapshot(thing) {
    return structuredClone(thing);
  }
}

class Chat extends AbstractChat {
  constructor(init) {
    super({ ...init, state: new MemoryState() });
  }
}

function chat(name, id, options = {}) {
  const transport = new DefaultChatTransport({ api: `${base}/ai-sdk/${name}`, fetch: teeFetch, body: options.body });
  const errors = [];
  const c = new Chat({ id, transport, onToolCall: options.onToolCall, onError: (e) => errors.push(String(e)) });
  c.errors = errors;
  return c;
}

/// What a chat ended with.
function outcome(c) {
  return { status: c.status, errors: c.errors, messages: c.messages };
}

const out = {};

// An agent's answer with its tool call, reasoning and text.
{
  const c = chat("weather", "ai-weather");
  await c.sendMessage({ text: "Weather in Paris?" });
  out.weather = outcome(c);
}

// An approval: requested, answered, and the call runs.
{
  const c = chat("ops", "ai-ops");
  await c.sendMessage({ text: "Restart the api" });
  out.approval = outcome(c);
  const part = c.messages.at(-1).parts.find((p) => p.type === "dynamic-tool");
  await c.addToolApprovalResponse({ id: part.approval.id, approved: true });
  await c.sendMessage();
  out.approved = outcome(c);
}

// A denial: the call is not run, and the model reads why.
{
  const c = chat("ops", "ai-ops-deny");
  await c.sendMessage({ text: "Restart the api" });
  const part = c.messages.at(-1).parts.find((p) => p.type === "dynamic-tool");
  await c.addToolApprovalResponse({ id: part.approval.id, approved: false, reason: "not now" });
  await c.sendMessage();
  out.denied = outcome(c);
}

// A tool the page runs itself.
{
  const tools = [
    {
      name: "confirm",
      description: "Asks the user to confirm a booking.",
      parameters: { type: "object", properties: { what: { type: "string" } }, required: ["what"] },
    },
  ];
  const calls = [];
  const c = chat("booking", "ai-booking", {
    body: { tools },
    onToolCall: ({ toolCall }) => {
      calls.push(toolCall);
      c.addToolOutput({ tool: toolCall.toolName, toolCallId: toolCall.toolCallId, output: "yes" });
    },
  });
  await c.sendMessage({ text: "Book a table" });
  await c.sendMessage();
  out.booking = { ...outcome(c), calls };
}

// A chat: the conversation goes on; a reconnect to a chat with no turn under way
// finds nothing to resume.
{
  const c = chat("chat", "ai-chat");
  await c.sendMessage({ text: "Weather in Oslo?" });
  await c.sendMessage({ text: "Thanks!" });
  await c.resumeStream();
  out.chat = outcome(c);
}

await Promise.all(seen);
out.chunks = chunks;
out.objections = objections;
process.stdout.write(JSON.stringify(out));
