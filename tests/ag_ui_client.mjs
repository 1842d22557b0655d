// The official AG-UI client (`@ag-ui/client`'s HttpAgent) against `serve`'s
// `/ag-ui/{name}`: run by tests/frontends.rs with the server's address as its argument.
//
// HttpAgent checks every event against the protocol's schemas and the order the
// protocol requires (it fails the run otherwise), assembles the messages, and keeps
// the interrupts a run ended with, refusing a next run that does not answer them.
// A field a schema of `@ag-ui/core` does not name is stripped by the client with a
// warning, which fails the test here (the protocol's objects are closed).
// Prints what the client saw as JSON, for the Rust test to check.

import { HttpAgent } from "@ag-ui/client";

const base = process.argv[2];
if (!base) throw new Error("usage: node ag_ui_client.mjs http://HOST:PORT");

// The client strips what a schema does not name, and says so on the console: every
// such objection is reported, for the test to fail on.
const objections = [];
const warn = console.warn;
console.warn = (...args) => {
  const text = args.map(String).join(" ");
  if (text.includes("[ag-ui]")) objections.push(text);
  else warn(...args);
};

/// Runs the agent once; what the client saw.
async function run(agent, parameters) {
  const events = [];
  let finished;
  const result = await agent.runAgent(parameters, {
    onEvent: ({ event }) => {
      events.push(event.type);
    },
    onRunFinishedEvent: ({ event }) => {
      finished = event;
    },
    onRunErrorEvent: ({ event }) => {
      throw new Error(`RUN_ERROR: ${event.message}`);
    },
  });
  return { events, finished, result: result.result, newMessages: result.newMessages };
}

const out = {};

// An agent's answer with its tool call and result, assembled into messages.
{
  const agent = new HttpAgent({ url: `${base}/ag-ui/weather`, threadId: "js-weather" });
  agent.addMessage({ id: "u1", role: "user", content: "Weather in Paris?" });
  out.weather = await run(agent);
  out.weather.messages = agent.messages;
  out.weather.state = agent.state;
}

// An approval: the run ends with an interrupt, the client refuses to go on without
// answering it, and the resume runs the call.
{
  const agent = new HttpAgent({ url: `${base}/ag-ui/ops`, threadId: "js-ops" });
  agent.addMessage({ id: "u1", role: "user", content: "Restart the api" });
  out.approval = await run(agent);
  out.approval.pending = agent.pendingInterrupts;
  try {
    await agent.runAgent();
    out.approval.unanswered = "accepted";
  } catch (e) {
    out.approval.unanswered = String(e.message);
  }
  const resume = agent.pendingInterrupts.map((i) => ({
    interruptId: i.id,
    status: "resolved",
    payload: { approved: true },
  }));
  out.resumed = await run(agent, { resume });
  out.resumed.messages = agent.messages;
  out.resumed.pending = agent.pendingInterrupts;
}

// A chat: the thread goes on with the next message.
{
  const agent = new HttpAgent({ url: `${base}/ag-ui/chat`, threadId: "js-chat" });
  agent.addMessage({ id: "u1", role: "user", content: "Weather in Oslo?" });
  await run(agent);
  agent.addMessage({ id: "u2", role: "user", content: "Thanks!" });
  out.chat = await run(agent);
  out.chat.messages = agent.messages;
}

// A frontend tool: the agent calls the page's `confirm`, the page answers it, and
// the run goes on with the answer.
{
  const tools = [
    {
      name: "confirm",
      description: "Asks the user to confirm a booking.",
      parameters: { type: "object", properties: { what: { type: "string" } }, required: ["what"] },
    },
  ];
  const agent = new HttpAgent({ url: `${base}/ag-ui/booking`, threadId: "js-booking" });
  agent.addMessage({ id: "u1", role: "user", content: "Book a table" });
  out.frontend = await run(agent, { tools });
  const call = agent.messages.flatMap((m) => m.toolCalls ?? []).find((c) => c.function.name === "confirm");
  out.frontend.call = call;
  agent.addMessage({ id: "t1", role: "tool", toolCallId: call.id, content: "yes" });
  out.frontendDone = await run(agent, { tools });
  out.frontendDone.messages = agent.messages;
}

out.objections = objections;
process.stdout.write(JSON.stringify(out));
