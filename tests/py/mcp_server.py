"""A real MCP server from the official SDK (`mcp` 2.x MCPServer, or 1.x
FastMCP), for the tool-tap tests.

usage: mcp_server.py {streamable-http|sse} PORT [--stateless] [--json] [--allow-host HOST:PORT] [--bind ADDR]

`--bind`: the address to listen on (default 127.0.0.1; a container: 0.0.0.0).

`--allow-host`: also accept requests whose `Host` is HOST:PORT (a sidecar tap
on another address forwards the client's `Host` unchanged; the SDK's DNS
rebinding protection accepts only localhost by default).

Tools: `lookup(city)` answers after 50 ms, `fail()` raises (a tool error,
`isError: true`), `slow()` reports progress twice, 20 ms apart.
"""
import asyncio
import sys

transport, port = sys.argv[1], int(sys.argv[2])
stateless, json_response = "--stateless" in sys.argv, "--json" in sys.argv
extra_host = sys.argv[sys.argv.index("--allow-host") + 1] if "--allow-host" in sys.argv else None
bind = sys.argv[sys.argv.index("--bind") + 1] if "--bind" in sys.argv else "127.0.0.1"


def security():
    from mcp.server.transport_security import TransportSecuritySettings

    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*", extra_host]
    return TransportSecuritySettings(allowed_hosts=hosts)

try:
    from mcp.server.mcpserver import Context, MCPServer

    V2 = True
    mcp = MCPServer("tokentap-test")
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import Context, FastMCP

    V2 = False
    kw = dict(host=bind, port=port)
    if transport == "streamable-http":
        kw.update(stateless_http=stateless, json_response=json_response)
    if extra_host:
        kw.update(transport_security=security())
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
    kw = dict(host=bind, port=port)
    if transport == "streamable-http":
        kw.update(stateless_http=stateless, json_response=json_response)
    if extra_host:
        kw.update(transport_security=security())
    mcp.run(transport=transport, **kw)
else:
    mcp.run(transport=transport)
