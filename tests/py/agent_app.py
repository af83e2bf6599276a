"""A compound system built on a real agent framework: an HTTP service
(Starlette on uvicorn) whose `POST /v1/chat/completions` runs an OpenAI
Agents SDK agent — an OpenAI-compatible model and an MCP server's tools —
and streams the agent's answer back as OpenAI chat chunks.

usage: agent_app.py PORT LLM_BASE_URL MCP_URL

It passes the request's `traceparent` and `x-request-id` on to every call
it makes (the model client's default headers, the MCP transport's
headers), as an application that propagates trace context does.
"""
import json
import sys

import uvicorn
from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from agents.mcp import MCPServerStreamableHttp
from openai import AsyncOpenAI
from openai.types.responses import ResponseTextDeltaEvent
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route

port, llm, mcp_url = int(sys.argv[1]), sys.argv[2], sys.argv[3]
set_tracing_disabled(True)


def chunk(delta, finish=None):
    return "data: " + json.dumps({"id": "agent", "object": "chat.completion.chunk", "created": 0,
        "model": "agent", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + "\n\n"


async def ask(request):
    body = await request.json()
    question = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
    headers = {k: request.headers[k] for k in ("traceparent", "x-request-id") if k in request.headers}

    async def answer():
        client = AsyncOpenAI(base_url=llm, api_key="sk-test", default_headers=headers, max_retries=0)
        model = OpenAIChatCompletionsModel(model="sim-model", openai_client=client)
        params = {"url": mcp_url, "headers": headers}
        async with MCPServerStreamableHttp(params=params, name="weather", cache_tools_list=False) as tools:
            agent = Agent(name="weather", instructions="Answer with the tool's help.",
                          model=model, mcp_servers=[tools])
            run = Runner.run_streamed(agent, question)
            yield chunk({"role": "assistant", "content": ""})
            async for ev in run.stream_events():
                if ev.type == "raw_response_event" and isinstance(ev.data, ResponseTextDeltaEvent):
                    if ev.data.delta:
                        yield chunk({"content": ev.data.delta})
        yield chunk({}, "stop")
        yield "data: [DONE]\n\n"

    return StreamingResponse(answer(), media_type="text/event-stream")


app = Starlette(routes=[Route("/v1/chat/completions", ask, methods=["POST"])])
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
