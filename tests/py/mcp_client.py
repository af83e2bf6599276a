"""Drive an MCP server with the official SDK's client and print what the
client saw as JSON (the tool-tap tests compare a direct session with one
through a tap).

usage: mcp_client.py {streamable-http|sse} URL [--calls N]

One session: initialize, tools/list, lookup, fail (a tool error), slow (two
progress notifications), an unknown tool (a JSON-RPC error), then N more
lookups (default 0).
"""
import asyncio
import json
import sys

from mcp import ClientSession

transport, url = sys.argv[1], sys.argv[2]
extra = int(sys.argv[sys.argv.index("--calls") + 1]) if "--calls" in sys.argv else 0


def text(result):
    return [getattr(c, "text", None) for c in result.content]


def is_error(result):
    return getattr(result, "is_error", getattr(result, "isError", None))


async def use(s, out):
    out["tools"] = sorted(t.name for t in (await s.list_tools()).tools)
    r = await s.call_tool("lookup", {"city": "Paris"})
    out["lookup"] = [is_error(r), text(r)]
    r = await s.call_tool("fail", {})
    out["fail"] = [is_error(r), text(r)]
    progress = []

    async def on_progress(p, total, message):
        progress.append([p, total, message])

    r = await s.call_tool("slow", {}, progress_callback=on_progress)
    out["slow"] = [is_error(r), text(r), progress]
    try:
        r = await s.call_tool("nope", {})
        out["nope"] = [is_error(r), text(r)]
    except Exception as e:  # the SDK raises on a JSON-RPC error
        out["nope"] = ["raised", type(e).__name__]
    for i in range(extra):
        r = await s.call_tool("lookup", {"city": f"c{i}"})
        assert text(r) == [f"Sunny in c{i}"], text(r)


async def main():
    out = {}
    if transport == "sse":
        from mcp.client.sse import sse_client

        ctx = sse_client(url)
    else:
        import mcp.client.streamable_http as sh

        connect = getattr(sh, "streamable_http_client", None) or sh.streamablehttp_client
        ctx = connect(url)
    async with ctx as streams:
        async with ClientSession(streams[0], streams[1]) as s:
            init = await s.initialize()
            out["protocol"] = getattr(init, "protocol_version", None) or init.protocolVersion
            await use(s, out)
    print(json.dumps(out, sort_keys=True))


asyncio.run(main())
