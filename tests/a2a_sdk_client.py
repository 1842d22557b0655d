"""The official A2A Python SDK (a2a-sdk) as a client of loopstack's A2A server.

Usage: python a2a_sdk_client.py BASE_URL

Finds each agent by its card, streams a task to its end, reads it back, answers an
approval (`input-required`) with a data part, cancels a task that waits, and
reports the SDK's error for an unknown task. Prints one JSON object of what it saw
for tests/a2a.rs to check; every message is parsed by the SDK's own protobuf types,
so a field the protocol does not have fails here.
"""

import asyncio
import json
import sys

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory, create_client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
)
from google.protobuf.json_format import MessageToDict, ParseDict


def text_message(message_id, text, task_id=None):
    message = Message(message_id=message_id, role=Role.ROLE_USER, parts=[Part(text=text)])
    if task_id:
        message.task_id = task_id
    return message


def as_dict(value):
    return MessageToDict(value, preserving_proto_field_name=False)


async def main(base):
    out = {}

    # Streaming (the card says so): the task, its progress, its answer.
    weather = await create_client(f"{base}/a2a/weather")
    events = []
    async for event in weather.send_message(SendMessageRequest(message=text_message("py-1", "Weather in Paris?"))):
        events.append(as_dict(event))
    out["stream"] = events
    task_id = events[0]["task"]["id"]
    task = await weather.get_task(GetTaskRequest(id=task_id, history_length=10))
    out["task"] = as_dict(task)
    await weather.close()

    # Without streaming: an approval is input-required; a data part answers it.
    ops = await create_client(f"{base}/a2a/ops", client_config=ClientConfig(streaming=False))
    first = [as_dict(e) async for e in ops.send_message(SendMessageRequest(message=text_message("py-2", "Restart the api")))]
    out["needs_input"] = first
    waiting = first[0]["task"]["id"]
    answer = Message(message_id="py-3", role=Role.ROLE_USER, task_id=waiting)
    answer.parts.append(ParseDict({"data": {"approved": True}}, Part()))
    out["approved"] = [as_dict(e) async for e in ops.send_message(SendMessageRequest(message=answer))]

    # A task that waits is cancelled.
    second = [as_dict(e) async for e in ops.send_message(SendMessageRequest(message=text_message("py-4", "Restart the api")))]
    cancelled = await ops.cancel_task(CancelTaskRequest(id=second[0]["task"]["id"]))
    out["cancelled"] = as_dict(cancelled)

    # The SDK's error for a task that is not there.
    try:
        await ops.get_task(GetTaskRequest(id="00000000-0000-7000-8000-000000000000"))
        out["unknown"] = "no error"
    except Exception as e:  # the SDK's error type is what is checked
        out["unknown"] = type(e).__name__
    await ops.close()

    # A chat's next turn on the same task, streamed, then followed with subscribe.
    chat = await create_client(f"{base}/a2a/chat")
    turn = [as_dict(e) async for e in chat.send_message(SendMessageRequest(message=text_message("py-5", "Weather in Oslo?")))]
    chat_task = turn[0]["task"]["id"]
    out["chat_first"] = turn[-1]
    again = [as_dict(e) async for e in chat.send_message(SendMessageRequest(message=text_message("py-6", "Thanks", chat_task)))]
    out["chat_second"] = again[-1]
    out["subscribe"] = [as_dict(e) async for e in chat.subscribe(SubscribeToTaskRequest(id=chat_task))]
    await chat.close()

    # A 0.3 client (the SDK's compatibility transport), on the card's 0.3 interface.
    card = await A2ACardResolver(httpx.AsyncClient(), f"{base}/a2a/ops").get_agent_card()
    legacy = [i for i in card.supported_interfaces if i.protocol_version == "0.3"]
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(legacy)
    old = ClientFactory(ClientConfig(streaming=True)).create(card)
    out["legacy_transport"] = type(old._transport).__name__
    out["legacy_stream"] = [as_dict(e) async for e in old.send_message(SendMessageRequest(message=text_message("py-7", "Restart the api")))]
    waiting = out["legacy_stream"][0]["task"]["id"]
    out["legacy_approved"] = [as_dict(e) async for e in old.send_message(SendMessageRequest(message=text_message("py-8", "approve", waiting)))]
    out["legacy_task"] = as_dict(await old.get_task(GetTaskRequest(id=waiting)))
    await old.close()

    print(json.dumps(out))


asyncio.run(main(sys.argv[1]))
