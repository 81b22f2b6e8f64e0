"""Asks `heapsnap mcp` for files inside and outside its roots, with the official MCP Python SDK
(tests/analysis/mcp.rs runs it).

usage: mcp_roots_client.py HEAPSNAP (client-roots ROOT | server-root ROOT | no-roots) PATH...

client-roots: the client declares ROOT (MCP roots) and the server is started bare;
server-root: the server is started with `--root ROOT` and the client declares none;
no-roots: neither. Prints one JSON list: each PATH's `summary` call, its isError and text.
"""

import asyncio
import json
import pathlib
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client


async def main():
    heapsnap, mode, *rest = sys.argv[1:]
    args, callback = ["mcp"], None
    if mode == "client-roots":
        root, *paths = rest

        async def list_roots(context):
            return types.ListRootsResult(roots=[types.Root(uri=pathlib.Path(root).as_uri(), name="snapshots")])

        callback = list_roots
    elif mode == "server-root":
        root, *paths = rest
        args += ["--root", root]
    else:
        paths = rest
    seen = []
    server = StdioServerParameters(command=heapsnap, args=args)
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, list_roots_callback=callback) as session:
            await session.initialize()
            for path in paths:
                result = await session.call_tool("summary", {"snapshot": path})
                text = "".join(c.text for c in result.content if c.type == "text")
                seen.append({"path": path, "isError": bool(result.isError), "text": text})
    json.dump(seen, sys.stdout)


asyncio.run(main())
