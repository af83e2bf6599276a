"""Drive the OpenAI Responses API (official `openai` client), the Anthropic
Messages API (official `anthropic` client) and Ollama's chat and generate
APIs (official `ollama` client) against one base URL, and TGI (Hugging
Face's `InferenceClient`, which posts to the URL itself) against a second,
streamed and not, and print what the clients parsed as JSON: the
integration tests compare a direct connection with one through a tap, and
prove the simulator's streams are what the vendors' own parsers accept."""
import json
import sys

import anthropic
import ollama
import openai
from huggingface_hub import InferenceClient


def responses(base_url: str) -> dict:
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="sk-test", max_retries=0)
    events, text, usage = 0, [], None
    for ev in client.responses.create(model="sim-model", input="hello", stream=True, max_output_tokens=20):
        events += 1
        if ev.type == "response.output_text.delta":
            text.append(ev.delta)
        elif ev.type == "response.completed":
            usage = {"input": ev.response.usage.input_tokens, "output": ev.response.usage.output_tokens}
    plain = client.responses.create(model="sim-model", input="hi", max_output_tokens=8)
    return {
        "stream": {"events": events, "text": "".join(text), "usage": usage},
        "plain": {"text": plain.output_text, "output": plain.usage.output_tokens, "status": plain.status},
    }


def messages(base_url: str) -> dict:
    client = anthropic.Anthropic(base_url=base_url, api_key="sk-ant-test", max_retries=0)
    with client.messages.stream(
        model="claude-sim", max_tokens=20, messages=[{"role": "user", "content": "hello"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    plain = client.messages.create(model="claude-sim", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    return {
        "stream": {
            "text": text,
            "stop": final.stop_reason,
            "usage": {"input": final.usage.input_tokens, "output": final.usage.output_tokens},
        },
        "plain": {"text": plain.content[0].text, "output": plain.usage.output_tokens},
    }


def ollama_api(base_url: str) -> dict:
    client = ollama.Client(host=base_url)
    parts, last = [], None
    for chunk in client.chat(
        model="llama3.2", messages=[{"role": "user", "content": "hello"}], stream=True, options={"num_predict": 20}
    ):
        parts.append(chunk.message.content)
        last = chunk
    plain = client.generate(model="llama3.2", prompt="Once", stream=False, options={"num_predict": 8})
    return {
        "stream": {
            "text": "".join(parts),
            "done": last.done,
            "reason": last.done_reason,
            "usage": {"input": last.prompt_eval_count, "output": last.eval_count},
        },
        "plain": {"text": plain.response, "output": plain.eval_count},
    }


def tgi(url: str) -> dict:
    client = InferenceClient(model=url)
    parts, last = [], None
    for r in client.text_generation("Once upon", max_new_tokens=20, stream=True, details=True):
        parts.append(r.token.text)
        last = r
    plain = client.text_generation("Once", max_new_tokens=8, details=True)
    return {
        "stream": {
            "text": "".join(parts),
            "finish": last.details.finish_reason,
            "usage": {"input": last.details.input_length, "output": last.details.generated_tokens},
        },
        "plain": {"text": plain.generated_text, "output": plain.details.generated_tokens},
    }


def main(base_url: str, tgi_url: str) -> None:
    from importlib.metadata import version

    print(json.dumps({
        "versions": {
            "openai": openai.__version__,
            "anthropic": anthropic.__version__,
            "ollama": version("ollama"),
            "huggingface_hub": version("huggingface_hub"),
        },
        "responses": responses(base_url),
        "messages": messages(base_url),
        "ollama": ollama_api(base_url),
        "tgi": tgi(tgi_url),
    }))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else sys.argv[1])
