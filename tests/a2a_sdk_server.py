"""An A2A agent served by the official A2A Python SDK (a2a-sdk), for loopstack's
A2A client to call.

Usage: python a2a_sdk_server.py

Prints `PORT <n>` once it listens on 127.0.0.1. The agent echoes a message as its
answer (an artifact); a message that asks to book something needs input (how many
people), and the next message on the task completes the booking.
"""

import asyncio
import socket
import sys

import uvicorn
from starlette.applications import Starlette

from a2a.helpers import new_task
from a2a.server.agent_execution import AgentExecutor
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part, TaskState


class Desk(AgentExecutor):
    async def execute(self, context, event_queue):
        text = context.get_user_input()
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        task = context.current_task
        if task is None:
            await event_queue.enqueue_event(
                new_task(context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED, history=[context.message])
            )
        await updater.start_work()
        if task is not None and task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await updater.add_artifact([Part(text=f"Booked a table for {text}")], name="answer")
            await updater.complete()
        elif text.lower().startswith("book"):
            await updater.requires_input(updater.new_agent_message([Part(text="For how many people?")]))
        else:
            await updater.add_artifact([Part(text=f"Echo: {text}")], name="answer")
            await updater.complete()

    async def cancel(self, context, event_queue):
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()


async def main():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    # Listening before the port is printed: a client that connects at once waits in
    # the backlog until the server accepts.
    sock.listen(128)
    port = sock.getsockname()[1]
    card = AgentCard(
        name="desk",
        description="Books tables and echoes what it is told.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=f"http://127.0.0.1:{port}/", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="book", name="book", description="Books a table.", tags=["booking"])],
    )
    handler = DefaultRequestHandler(agent_executor=Desk(), task_store=InMemoryTaskStore(), agent_card=card)
    app = Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, rpc_url="/"))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    print(f"PORT {port}", flush=True)
    await server.serve(sockets=[sock])


asyncio.run(main())
