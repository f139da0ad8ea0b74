// The official A2A JavaScript client on its REST (HTTP+JSON) transport, through the gateway.
// Usage: node flow.mjs <agent base URL> <bearer token> <protocol version 1.0|0.3> [step task]
// Prints one JSON object: what each step saw (states as A2A names them, errors by kind).
// With a step ("follow-up" or "get") and a task id, only that call is made and its refusal
// (or "accepted") printed.
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  RestTransportFactory,
} from "@a2a-js/sdk/client";
import { SendMessageRequest, TaskState, taskStateToJSON } from "@a2a-js/sdk";
import { randomUUID } from "node:crypto";

const [base, bearer, version, step, stepTask] = process.argv.slice(2);
const authed = (input, init = {}) => {
  const headers = new Headers(init.headers || {});
  headers.set("Authorization", `Bearer ${bearer}`);
  return fetch(input, { ...init, headers });
};

const resolver = new DefaultAgentCardResolver({ fetchImpl: authed });
const card = await resolver.resolve(base.endsWith("/") ? base : `${base}/`);
// A client of one version: only the card's interfaces of that version.
card.supportedInterfaces = card.supportedInterfaces.filter((i) => i.protocolVersion === version);
const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new RestTransportFactory({ fetchImpl: authed, legacyCompat: { enabled: true } })],
    preferredTransports: ["HTTP+JSON"],
  }),
);
const client = await factory.createFromAgentCard(card);

const send = (text, taskId) =>
  SendMessageRequest.fromJSON({
    message: {
      messageId: randomUUID(),
      role: "ROLE_USER",
      parts: [{ text }],
      ...(taskId ? { taskId } : {}),
    },
  });
const stateOf = (task) => taskStateToJSON(task.status.state);
const taskOf = (result) => (result.payload ? result.payload.value : result);
const refusal = async (work) => {
  try {
    await work();
    return "accepted";
  } catch (error) {
    // The REST transports name their errors RestTaskNotFoundError and the like.
    return error.constructor.name.replace(/^Rest/, "");
  }
};
const frameState = (frame) => {
  const { $case, value } = frame.payload;
  if ($case === "task" || $case === "statusUpdate") {
    return taskStateToJSON(($case === "task" ? value : value).status.state);
  }
  return $case;
};

if (step) {
  const call =
    step === "get"
      ? () => client.getTask({ id: stepTask, historyLength: 0 })
      : () => client.sendMessage(send("Rome", stepTask));
  let message = null;
  const name = await refusal(() =>
    call().catch((error) => {
      message = error.message;
      throw error;
    }),
  );
  console.log(JSON.stringify({ refusal: name, message }));
  process.exit(0);
}

const out = { binding: client.transport?.protocolName ?? null, protocol: client.protocolVersion };

// start → input-required → follow-up → completed, then get
const first = taskOf(await client.sendMessage(send("weather?")));
out.start = stateOf(first);
out.question = first.status.message.parts[0].content.value;
const second = taskOf(await client.sendMessage(send("Paris", first.id)));
out.followUp = stateOf(second);
const got = await client.getTask({ id: first.id, historyLength: 0 });
out.get = stateOf(got);
out.artifact = got.artifacts[0].parts[0].content.value;
out.taskId = first.id;

// refusals: a terminal task, an invisible task, bad params
out.terminalFollowUp = await refusal(() => client.sendMessage(send("Rome", first.id)));
out.unknownTask = await refusal(() => client.getTask({ id: "no-such-task", historyLength: 0 }));

// streaming
const streamed = [];
for await (const frame of client.sendMessageStream(send("weather?"))) streamed.push(frameState(frame));
out.stream = streamed;

// cancel, then cancel again (terminal)
const waiting = taskOf(await client.sendMessage(send("weather?")));
out.cancel = stateOf(await client.cancelTask({ id: waiting.id }));
out.cancelAgain = await refusal(() => client.cancelTask({ id: waiting.id }));

// subscribe: the stored task first, then its updates until it completes
const followed = taskOf(await client.sendMessage(send("weather?")));
const frames = [];
const subscription = (async () => {
  for await (const frame of client.resubscribeTask({ id: followed.id })) {
    frames.push(frameState(frame));
    if (frames.length === 1) await client.sendMessage(send("Oslo", followed.id));
  }
})();
await subscription;
out.subscribe = frames;
out.subscribeTerminal = await refusal(async () => {
  for await (const _ of client.resubscribeTask({ id: followed.id })) {
  }
});

if (version === "1.0") {
  const listed = await client.listTasks({ pageSize: 2, historyLength: 0, includeArtifacts: false });
  out.list = { count: listed.tasks.length, total: listed.totalSize, more: listed.nextPageToken !== "" };
  out.badParams = await refusal(() => client.listTasks({ pageSize: 500 }));
} else {
  out.badParams = await refusal(() => client.getTask({ id: first.id, historyLength: -1 }));
}
console.log(JSON.stringify(out));
