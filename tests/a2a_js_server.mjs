// An A2A agent served by the official A2A JavaScript SDK (@a2a-js/sdk on express),
// for loopstack's A2A client to call. Usage: node a2a_js_server.mjs
//
// Prints `PORT <n>` once it listens on 127.0.0.1. The agent echoes a message as
// its answer (an artifact); a message that asks to book something needs input
// (how many people), and the next message on the task completes the booking.
import express from 'express';
import { Role, TaskState } from '@a2a-js/sdk';
import { DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';

const text = (value) => ({ content: { $case: 'text', value }, metadata: undefined, filename: '', mediaType: '' });
const status = (task, state, message) => ({
  kind: 'statusUpdate',
  data: {
    taskId: task.taskId, contextId: task.contextId, metadata: undefined,
    status: { state, message, timestamp: new Date().toISOString() },
  },
});
const agentMessage = (task, value) => ({
  messageId: `${task.taskId}-${Date.now()}`, contextId: task.contextId, taskId: task.taskId, role: Role.ROLE_AGENT,
  parts: [text(value)], metadata: undefined, extensions: [], referenceTaskIds: [],
});

class Desk {
  async execute(context, bus) {
    const input = context.userMessage.parts.map((p) => p.content?.value ?? '').join('\n');
    const previous = context.task;
    bus.publish({
      kind: 'task',
      data: previous ?? {
        id: context.taskId, contextId: context.contextId, history: [context.userMessage], artifacts: [],
        metadata: undefined, status: { state: TaskState.TASK_STATE_SUBMITTED, message: undefined, timestamp: undefined },
      },
    });
    const answer = (value) => {
      bus.publish({
        kind: 'artifactUpdate',
        data: {
          taskId: context.taskId, contextId: context.contextId, append: false, lastChunk: true, metadata: undefined,
          artifact: { artifactId: 'answer', name: 'answer', description: '', parts: [text(value)], metadata: undefined, extensions: [] },
        },
      });
      bus.publish(status(context, TaskState.TASK_STATE_COMPLETED, undefined));
    };
    if (previous && previous.status.state === TaskState.TASK_STATE_INPUT_REQUIRED) {
      answer(`Booked a table for ${input}`);
    } else if (input.toLowerCase().startsWith('book')) {
      bus.publish(status(context, TaskState.TASK_STATE_INPUT_REQUIRED, agentMessage(context, 'For how many people?')));
    } else {
      answer(`Echo: ${input}`);
    }
    bus.finished();
  }

  async cancelTask(taskId, bus) {
    bus.finished();
  }
}

const app = express();
const server = app.listen(0, '127.0.0.1', () => {
  const port = server.address().port;
  const card = {
    name: 'desk', description: 'Books tables and echoes what it is told.', version: '1.0.0',
    supportedInterfaces: [{ url: `http://127.0.0.1:${port}/`, protocolBinding: 'JSONRPC', protocolVersion: '1.0', tenant: '' }],
    capabilities: { streaming: true, pushNotifications: false, extensions: [], extendedAgentCard: false },
    defaultInputModes: ['text/plain'], defaultOutputModes: ['text/plain'],
    skills: [{ id: 'book', name: 'book', description: 'Books a table.', tags: ['booking'], examples: [], inputModes: [], outputModes: [], securityRequirements: [] }],
    provider: undefined, documentationUrl: undefined, iconUrl: undefined, securitySchemes: {}, securityRequirements: [], signatures: [],
  };
  const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new Desk());
  app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: handler }));
  app.use('/', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
  console.log(`PORT ${port}`);
});
