"""Drive an OpenAI-compatible endpoint with the official `openai` client and
print what the client saw as JSON: used by the integration tests to compare a
direct connection with one through a tokentap tap."""
import json
import sys

import openai


def main(base_url: str) -> None:
    client = openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    out = {"openai_version": openai.__version__}

    # Streaming chat with usage.
    stream = client.chat.completions.create(
        model="sim-model",
        messages=[{"role": "user", "content": "hello"}],
        stream=True,
        stream_options={"include_usage": True},
        max_tokens=24,
    )
    content, chunks, usage, finish = [], 0, None, None
    for chunk in stream:
        chunks += 1
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for choice in chunk.choices:
            if choice.delta.content:
                content.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    out["stream"] = {"content": "".join(content), "chunks": chunks, "usage": usage, "finish": finish}

    # Non-streaming chat.
    resp = client.chat.completions.create(
        model="sim-model", messages=[{"role": "user", "content": "hi"}], max_tokens=10
    )
    out["plain"] = {
        "content": resp.choices[0].message.content,
        "finish": resp.choices[0].finish_reason,
        "usage": resp.usage.model_dump(),
        "model": resp.model,
    }

    # Streaming legacy completions.
    text = []
    for chunk in client.completions.create(model="sim-model", prompt="Once", stream=True, max_tokens=8):
        for choice in chunk.choices:
            text.append(choice.text)
    out["completions"] = "".join(text)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
