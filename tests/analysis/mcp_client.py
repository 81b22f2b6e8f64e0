"""Drives `heapsnap mcp` with the official MCP Python SDK (tests/mcp.rs runs it).

usage: mcp_client.py HEAPSNAP ROOT NAMED_SNAPSHOT DAMAGED_SNAPSHOT SERIES_SNAPSHOT...

The client declares ROOT, the directory of the snapshots, as its one root (MCP roots).

Prints one JSON document: what the client saw (the negotiated version, the tools, and each
call's isError and parsed text). tests/mcp.rs checks it; this script only talks.
"""

import asyncio
import json
import pathlib
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client


def outcome(result):
    text = "".join(c.text for c in result.content if c.type == "text")
    try:
        body = json.loads(text)
    except ValueError:
        body = text
    return {"isError": bool(result.isError), "body": body}


async def main():
    heapsnap, root, named, damaged, *series = sys.argv[1:]
    server = StdioServerParameters(command=heapsnap, args=["mcp"])
    seen = {}

    async def list_roots(context):
        return types.ListRootsResult(roots=[types.Root(uri=pathlib.Path(root).as_uri(), name="snapshots")])

    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, list_roots_callback=list_roots) as session:
            init = await session.initialize()
            seen["protocol"] = init.protocolVersion
            seen["server"] = init.serverInfo.name
            tools = await session.list_tools()
            seen["tools"] = {t.name: t.inputSchema for t in tools.tools}
            seen["top"] = outcome(await session.call_tool("top", {"snapshot": named, "by": "root", "limit": 3}))
            seen["path"] = outcome(await session.call_tool("path", {"snapshot": named, "kind": "Hashtbl"}))
            seen["diff"] = outcome(await session.call_tool("diff", {"snapshots": series}))
            seen["damaged"] = outcome(await session.call_tool("summary", {"snapshot": damaged}))
            seen["sites"] = outcome(await session.call_tool("sites", {"snapshot": named}))
            seen["bad_by"] = outcome(await session.call_tool("top", {"snapshot": named, "by": "colour"}))
            # The server is still there after the errors.
            seen["summary"] = outcome(await session.call_tool("summary", {"snapshot": named}))
    json.dump(seen, sys.stdout)


asyncio.run(main())
