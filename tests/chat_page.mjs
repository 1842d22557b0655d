// A small chat page on the AI SDK's chat (`ai`'s AbstractChat, what `useChat` runs)
// against `serve`'s `/ai-sdk/desk`: it chats, shows the agent's tool calls, approves
// a call with a button, and on load resumes a turn still under way (as `useChat`
// with `resume: true`). tests/frontends.rs bundles it with esbuild and drives it in
// Chromium.

import { AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from "ai";

const app = document.getElementById("app");
app.innerHTML = `
  <div id="messages"></div>
  <form id="form"><input id="prompt" autocomplete="off"><button id="send" type="submit">Send</button></form>
  <div id="status"></div>
  <ul id="errors"></ul>`;

let chat;

/// Draws the conversation: each message's text and tool calls, and an Approve
/// button on a call that waits for one.
function render() {
  const list = document.getElementById("messages");
  list.replaceChildren();
  for (const message of chat?.messages ?? []) {
    const item = document.createElement("div");
    item.className = "message";
    item.dataset.role = message.role;
    for (const part of message.parts) {
      if (part.type === "text") {
        const text = document.createElement("p");
        text.className = "text";
        text.textContent = part.text;
        item.append(text);
      } else if (part.type === "dynamic-tool" || part.type.startsWith("tool-")) {
        const tool = document.createElement("div");
        tool.className = "tool";
        tool.dataset.state = part.state;
        tool.textContent = `${part.toolName ?? part.type.slice(5)} ${JSON.stringify(part.input ?? {})}`;
        if (part.state === "approval-requested") {
          const approve = document.createElement("button");
          approve.className = "approve";
          approve.textContent = "Approve";
          approve.onclick = () => chat.addToolApprovalResponse({ id: part.approval.id, approved: true });
          tool.append(approve);
        }
        item.append(tool);
      }
    }
    list.append(item);
  }
  document.getElementById("status").textContent = chat?.status ?? "";
}

/// The chat's state, drawn on every change (what `useChat` keeps in React state).
class PageState {
  #status = "ready";
  #messages = [];
  error = undefined;
  get status() {
    return this.#status;
  }
  set status(status) {
    this.#status = status;
    render();
  }
  get messages() {
    return this.#messages;
  }
  set messages(messages) {
    this.#messages = messages;
    render();
  }
  pushMessage(message) {
    this.messages = [...this.#messages, message];
  }
  popMessage() {
    this.messages = this.#messages.slice(0, -1);
  }
  replaceMessage(index, message) {
    this.messages = this.#messages.map((m, i) => (i === index ? message : m));
  }
  snapshot(thing) {
    return structuredClone(thing);
  }
}

class Chat extends AbstractChat {
  constructor(init) {
    super({ ...init, state: new PageState() });
  }
}

chat = new Chat({
  id: "page-chat",
  transport: new DefaultChatTransport({ api: "/ai-sdk/desk" }),
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  onError: (error) => {
    const item = document.createElement("li");
    item.textContent = String(error);
    document.getElementById("errors").append(item);
  },
});
window.chat = chat;

document.getElementById("form").onsubmit = (event) => {
  event.preventDefault();
  const prompt = document.getElementById("prompt");
  chat.sendMessage({ text: prompt.value });
  prompt.value = "";
};

// A turn under way when the page (re)loads is picked up where it is.
chat.resumeStream();
render();
