"""Drives loopstack's MCP server with the official MCP Python SDK (`mcp` on PyPI).

Run by tests/mcp_server.rs, which asserts on the one JSON object this prints:

    python tests/mcp_client.py [--discover] stdio COMMAND [ARGS...]   # starts the server itself
    python tests/mcp_client.py [--discover] http URL TOKEN            # a server already listening

It starts with the `initialize` handshake, or with `--discover` with
`server/discover` (the 2026-07-28 revision: each request then carries its version,
and HTTP needs no session).

It lists the tools, calls `greet` (which ends at once), `review` (which waits for a
signal), answers it with `loopstack_signal` (a wrong signal and a payload that does
not fit first), calls the `desk` agent (whose calls wait for approval) and answers
with `loopstack_decide`, and asks about a run that does not exist. Over HTTP it
also sends requests with no token, a wrong token and another Origin, with plain
urllib, and reports their HTTP status.
"""

import asyncio
import json
import sys
import urllib.error
import urllib.request

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client


def result(res):
    """A tool result as plain JSON: its error flag, text and structured content."""
    texts = [c.text for c in res.content if getattr(c, "type", None) == "text"]
    return {"is_error": bool(res.is_error), "text": "\n".join(texts), "structured": res.structured_content}


async def session_steps(session, discover):
    out = {}
    if discover:
        await session.discover()
    else:
        await session.initialize()
    name = session.server_info.name if session.server_info else None
    out["server"] = {"name": name, "protocol": session.protocol_version}
    listed = await session.list_tools()
    out["tools"] = {
        t.name: {"description": t.description, "input_schema": t.input_schema, "output_schema": t.output_schema}
        for t in listed.tools
    }

    out["greet"] = result(await session.call_tool("greet", {"name": "ada"}))

    review = result(await session.call_tool("review", {"text": " Hello "}))
    out["review"] = review
    run = (review["structured"] or {}).get("run_id", "")
    out["review_wrong_signal"] = result(await session.call_tool("loopstack_signal", {"run_id": run, "signal": "publish"}))
    out["review_bad_payload"] = result(
        await session.call_tool("loopstack_signal", {"run_id": run, "signal": "approve", "payload": {"reviewer": 3}})
    )
    out["review_approved"] = result(
        await session.call_tool("loopstack_signal", {"run_id": run, "signal": "approve", "payload": {"reviewer": "ada"}})
    )

    desk = result(await session.call_tool("desk", {"input": "Reset the passwords of ada and bob"}))
    out["desk"] = desk
    desk_run = (desk["structured"] or {}).get("run_id", "")
    calls = ((desk["structured"] or {}).get("waits_for") or {}).get("pending_calls") or []
    ada = next((c["call_id"] for c in calls if c["arguments"].get("user") == "ada"), "")
    out["desk_unknown_call"] = result(
        await session.call_tool("loopstack_decide", {"run_id": desk_run, "approve": ["call_nope"]})
    )
    out["desk_approve_ada"] = result(await session.call_tool("loopstack_decide", {"run_id": desk_run, "approve": [ada]}))
    out["desk_deny_rest"] = result(
        await session.call_tool("loopstack_decide", {"run_id": desk_run, "deny": "all", "reason": "bob is on leave"})
    )

    out["unknown_run"] = result(
        await session.call_tool(
            "loopstack_signal", {"run_id": "01890a5d-ac96-774b-bcce-b302099a8057", "signal": "approve"}
        )
    )
    return out


def status(url, headers):
    """The HTTP status of an `initialize` request with these headers."""
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}},
        }
    ).encode()
    request = urllib.request.Request(url, data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    request.add_header("Accept", "application/json, text/event-stream")
    for name, value in headers.items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


async def main():
    args = sys.argv[1:]
    discover = args[0] == "--discover"
    if discover:
        args = args[1:]
    mode = args[0]
    if mode == "stdio":
        params = StdioServerParameters(command=args[1], args=args[2:])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                out = await session_steps(session, discover)
    elif mode == "http":
        url, token = args[1], args[2]
        import httpx2

        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
            async with streamable_http_client(url, http_client=client) as (read, write):
                async with ClientSession(read, write) as session:
                    out = await session_steps(session, discover)
        out["refused"] = {
            "no_token": status(url, {}),
            "wrong_token": status(url, {"Authorization": "Bearer not-the-token"}),
            "other_origin": status(url, {"Authorization": f"Bearer {token}", "Origin": "http://evil.example"}),
            "same_origin": status(url, {"Authorization": f"Bearer {token}", "Origin": "http://" + url.split("/")[2]}),
        }
    else:
        raise SystemExit(f"unknown mode {mode!r}: stdio or http")
    print(json.dumps(out))


asyncio.run(main())
