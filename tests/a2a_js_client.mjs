// The official A2A JavaScript SDK (@a2a-js/sdk) as a client of loopstack's A2A
// server. Usage: node a2a_js_client.mjs BASE_URL
//
// Finds each agent by its card (the agent's URL ends in `/`: the SDK resolves the card
// path relative to it), streams a task, answers an approval
// (input-required) with a data part, and reports the SDK's error for an unknown
// task. Prints one JSON object of what it saw, for tests/a2a.rs to check.
import { ClientFactory } from '@a2a-js/sdk/client';
import { Role, TaskState } from '@a2a-js/sdk';

const base = process.argv[2];
const factory = new ClientFactory();
const part = (content) => ({ content, metadata: undefined, filename: '', mediaType: '' });
const message = (messageId, parts, taskId = '') => ({
  messageId, contextId: '', taskId, role: Role.ROLE_USER, parts, metadata: undefined, extensions: [],
  referenceTaskIds: [],
});
const request = (m) => ({ tenant: '', message: m, configuration: undefined, metadata: undefined });
const state = (s) => TaskState[s];
const out = {};

const weather = await factory.createFromUrl(`${base}/a2a/weather/`);
out.stream = [];
let taskId;
for await (const event of weather.sendMessageStream(
  request(message('js-1', [part({ $case: 'text', value: 'Weather in Paris?' })])))) {
  const { $case, value } = event.payload;
  if ($case === 'task') taskId = value.id;
  out.stream.push($case === 'statusUpdate' ? `statusUpdate ${state(value.status.state)}` : $case);
  if ($case === 'artifactUpdate') out.answer = value.artifact.parts[0].content.value;
}
const task = await weather.getTask({ tenant: '', id: taskId, historyLength: 10 });
out.task = { state: state(task.status.state), history: task.history.length, artifact: task.artifacts[0].parts[0].content.value };

const ops = await factory.createFromUrl(`${base}/a2a/ops/`);
const waiting = await ops.sendMessage(request(message('js-2', [part({ $case: 'text', value: 'Restart the api' })])));
out.waiting = { state: state(waiting.status.state), asks: waiting.status.message.parts[0].content.value };
const done = await ops.sendMessage(request(message('js-3', [part({ $case: 'data', value: { approved: true } })], waiting.id)));
out.approved = { state: state(done.status.state), artifact: done.artifacts[0].parts[0].content.value };

try {
  await ops.getTask({ tenant: '', id: '00000000-0000-7000-8000-000000000000', historyLength: undefined });
  out.unknown = 'no error';
} catch (e) {
  out.unknown = e.constructor.name;
}
console.log(JSON.stringify(out));
