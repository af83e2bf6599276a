"""A real MCP server from the official SDK (`mcp` 2.x MCPServer, or 1.x
FastMCP), for the tool-tap tests.

usage: mcp_server.py {streamable-http|sse} PORT [--stateless] [--json]

Tools: `lookup(city)` answers after 50 ms, `fail()` raises (a tool error,
`isError: true`), `slow()` reports progress twice, 20 ms apart.
"""
import asyncio
import sys

transport, port = sys.argv[1], int(sys.argv[2])
stateless, json_response = "--stateless" in sys.argv, "--json" in sys.argv
try:
    from mcp.server.mcpserver import Context, MCPServer

    V2 = True
    mcp = MCPServer("tokentap-test")
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import Context, FastMCP

    V2 = False
    kw = dict(host="127.0.0.1", port=port)
    if transport == "streamable-http":
        kw.update(stateless_http=stateless, json_response=json_response)
    mcp = FastMCP("tokentap-test", **kw)


@mcp.tool()
async def lookup(city: str) -> str:
    """Look up the weather for a city."""
    await asyncio.sleep(0.05)
    return f"Sunny in {city}"


@mcp.tool()
async def fail() -> str:
    """Always raises."""
    raise RuntimeError("boom")


@mcp.tool()
async def slow(ctx: Context) -> str:
    """Reports progress twice."""
    for i in (1, 2):
        await ctx.report_progress(i, 2, f"step {i}")
        await asyncio.sleep(0.02)
    return "done"


if V2:
    kw = dict(host="127.0.0.1", port=port)
    if transport == "streamable-http":
        kw.update(stateless_http=stateless, json_response=json_response)
    mcp.run(transport=transport, **kw)
else:
    mcp.run(transport=transport)
