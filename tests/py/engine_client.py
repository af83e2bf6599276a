"""Streams chat completions through the official `openai` client and prints,
as JSON, the client's own timings: for each request its `x-request-id`, the
moment `create()` was called, and the arrival of every chunk that carried
content (time.perf_counter, ms from the call). Used by it::engine to compare
tokentap's TTFT and inter-token times with the client's.

    python engine_client.py BASE_URL PROMPT_FILE N MAX_TOKENS ID_PREFIX
"""
import json
import sys
import time

import openai


def main(base_url: str, prompt_file: str, n: int, max_tokens: int, prefix: str) -> None:
    prompt = open(prompt_file, encoding="utf-8").read()
    client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0)
    # A fresh client's first stream pays for its setup (imports, model
    # classes built on first use; ~2-3 ms late on its first chunk): warm up.
    for _ in client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2, stream=True
    ):
        pass
    out = []
    for i in range(n):
        rid = f"{prefix}-{i}"
        t0 = time.perf_counter()
        stream = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": f"{i} {prompt}"}],
            stream=True,
            stream_options={"include_usage": True},
            max_tokens=max_tokens,
            temperature=0,
            seed=1,
            extra_body={"cache_prompt": False},
            extra_headers={"x-request-id": rid},
        )
        content_ms, usage = [], None
        for chunk in stream:
            now = (time.perf_counter() - t0) * 1e3
            if chunk.usage is not None:
                usage = chunk.usage.model_dump()
            if any(c.delta.content for c in chunk.choices):
                content_ms.append(now)
        out.append({"id": rid, "content_ms": content_ms, "usage": usage})
    json.dump({"openai_version": openai.__version__, "requests": out}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
