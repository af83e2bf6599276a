#!/usr/bin/env python3
"""Writes a tiny random-weight llama-architecture GGUF model for the tests.

    .cache/engine/venv/bin/python scripts/tiny_gguf.py [OUT] [--n-embd N --n-layer N --n-ff N ...]
    (OUT defaults to .cache/engine/tiny.gguf; the defaults give the tiny model
    below. A bigger shape gives a slower server, e.g. for timing tests that need
    tokens a few milliseconds apart: see --help.)

No model hub: the weights are random (fixed seed) and the tokenizer is a real
byte-level BPE (GPT-2 style) trained here, with the `tokenizers` package, on the
text below. The file is written with the `gguf` package (gguf-py, the writer
llama.cpp's own converters use). Same packages, same bytes: the script is
deterministic and prints the sha256 of what it wrote.

What llama-server sees:
  architecture   llama, 2 layers, n_embd 64, 4 heads (2 KV heads, GQA), n_ff 192,
                 trained context 4096, f32 weights (0.8 MB)
  tokenizer      tokenizer.ggml.model = "gpt2", tokenizer.ggml.pre = "gpt-2"
                 (the exact GPT-2 split regex, which is what the ByteLevel
                 pre-tokenizer of `tokenizers` uses), 770 tokens, 510 merges
  special tokens <s> (bos, prepended), </s> (eos), <|im_start|>, <|im_end|>
                 (end of turn; llama.cpp treats it as end of generation)
  chat template  ChatML (tokenizer.chat_template), so /v1/chat/completions works

The output is shaped so the tests get clean, long answers from random weights:
one hidden dimension carries a constant through the residual stream (so the
output layer gets a per-token bias), and that bias rules out the special tokens
(hence eos: a reply ends at max_tokens / n_predict or a `stop` string, never by
itself) and the single-byte tokens that are not printable ASCII (so every
reply is valid ASCII text, whatever the sampler).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os

import numpy as np
from gguf import GGUFWriter, LlamaFileType, TokenType
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SEED = 20240601
VOCAB_SIZE = 1024  # upper bound; the text below gives a little less
RMS_EPS = 1e-5
ROPE_BASE = 10000.0

BOS, EOS, IM_START, IM_END = "<s>", "</s>", "<|im_start|>", "<|im_end|>"
SPECIALS = [BOS, EOS, IM_START, IM_END]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

TEXT = """\
The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.
A measuring proxy sits between the client and the model server. It reads every request,
forwards it unchanged, and watches the answer stream back one token at a time.
Time to first token, time between tokens, and the number of tokens in the prompt and in
the completion are the numbers that matter. The cache keeps the prompt that was already
seen, so the second request with the same prefix is faster than the first one.
Hello! How are you today? I am fine, thank you. What is the weather like in the city?
It is sunny and warm, with a light wind from the west. Tomorrow it will rain again.
Once upon a time there was a small robot who wanted to learn how to count to one hundred.
One, two, three, four, five, six, seven, eight, nine, ten. 0 1 2 3 4 5 6 7 8 9 10 42 100 2048.
The server answers in chunks: data lines, each with a small piece of JSON, and a final
line that says it is done. Usage tells how many tokens were read and how many were written.
Streaming, batching, scheduling, sampling, temperature, seed, context, slot, queue, latency.
def hello(name): return "Hello, " + name + "!"  # a little code, too
{"role": "user", "content": "Say something nice."} [1, 2, 3] (a, b) <tag> x = y + z; a-b/c*d
She sells sea shells by the sea shore. Peter Piper picked a peck of pickled peppers.
Every good boy does fine. All work and no play makes a dull day. Better late than never.
The model is tiny and its weights are random, so what it says means nothing at all,
but it says it with real tokens, through a real server, at a real speed.
"""


def train_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=1,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = TEXT.splitlines()
    # Repeat so that frequent pairs clearly outrank rare ones.
    tok.train_from_iterator(lines * 4, trainer=trainer)
    return tok


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map (what ByteLevel uses)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def main() -> None:
    ap = argparse.ArgumentParser(description="Write a tiny random-weight llama GGUF model.")
    ap.add_argument("out", nargs="?", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", ".cache", "engine", "tiny.gguf"))
    ap.add_argument("--n-embd", type=int, default=64)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-head-kv", type=int, default=2)
    ap.add_argument("--n-ff", type=int, default=192)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-ctx-train", type=int, default=4096)
    ap.add_argument("--f16", action="store_true", help="f16 matrices (half the file; f32 by default)")
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args()
    N_EMBD, N_HEAD, N_HEAD_KV, N_FF, N_LAYER = args.n_embd, args.n_head, args.n_head_kv, args.n_ff, args.n_layer
    assert N_EMBD % N_HEAD == 0 and N_HEAD % N_HEAD_KV == 0, "n_embd % n_head and n_head % n_head_kv must be 0"
    out = os.path.abspath(args.out)
    os.makedirs(os.path.dirname(out), exist_ok=True)

    tok = train_tokenizer()
    spec = json.loads(tok.to_str())
    vocab: dict[str, int] = spec["model"]["vocab"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    n_vocab = len(vocab)
    tokens = [""] * n_vocab
    for t, i in vocab.items():
        tokens[i] = t
    assert all(tokens), "vocab ids are not contiguous"
    ids = {t: vocab[t] for t in SPECIALS}
    token_types = [TokenType.CONTROL if t in ids else TokenType.NORMAL for t in tokens]

    # Output bias: specials, and single-byte tokens that are not printable ASCII
    # (newline stays allowed), can never be sampled.
    b2u = bytes_to_unicode()
    allowed_bytes = {b2u[b] for b in range(0x20, 0x7F)} | {b2u[0x0A]}
    banned = [vocab[t] for t in SPECIALS]
    banned += [vocab[c] for b, c in b2u.items() if c not in allowed_bytes and c in vocab]
    # Multi-character tokens come from the ASCII text above, so they are printable
    # by construction; check it anyway.
    for t, i in vocab.items():
        if t not in ids and len(t) > 1:
            assert all(ch in allowed_bytes for ch in t), f"unexpected token {t!r}"

    rng = np.random.default_rng(args.seed)
    head_dim = N_EMBD // N_HEAD

    mat_type = np.float16 if args.f16 else np.float32

    def w(rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(scale / np.sqrt(cols)))

    # Dimension 0 of the residual stream is a constant C, a pure bias channel:
    # the embeddings set it, no layer writes to it (row 0 of attn_output and
    # ffn_down is zero) and no layer reads it (column 0 of the input-side
    # matrices is zero). After the final RMS norm it is a positive number of
    # order 1, so column 0 of `output` acts as a per-token output bias.
    c = 1.0
    tok_embd = rng.standard_normal((n_vocab, N_EMBD), dtype=np.float32)
    tok_embd[:, 0] = c

    def w_in(rows: int) -> np.ndarray:
        m = w(rows, N_EMBD)
        m[:, 0] = 0.0
        return m.astype(mat_type)

    writer = GGUFWriter(out, "llama")
    writer.add_name("tokentap-tiny")
    writer.add_description("Tiny random-weight llama model for tokentap tests (not a language model)")
    writer.add_file_type(LlamaFileType.MOSTLY_F16 if args.f16 else LlamaFileType.ALL_F32)
    writer.add_context_length(args.n_ctx_train)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(ROPE_BASE)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_vocab_size(n_vocab)

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(ids[BOS])
    writer.add_eos_token_id(ids[EOS])
    writer.add_eot_token_id(ids[IM_END])
    writer.add_pad_token_id(ids[EOS])
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    writer.add_tensor("token_embd.weight", tok_embd)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        wo = w(N_EMBD, N_HEAD * head_dim)
        wo[0, :] = 0.0
        down = w(N_EMBD, N_FF)
        down[0, :] = 0.0
        writer.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(p + "attn_q.weight", w_in(N_HEAD * head_dim))
        writer.add_tensor(p + "attn_k.weight", w_in(N_HEAD_KV * head_dim))
        writer.add_tensor(p + "attn_v.weight", w_in(N_HEAD_KV * head_dim))
        writer.add_tensor(p + "attn_output.weight", wo.astype(mat_type))
        writer.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(p + "ffn_gate.weight", w_in(N_FF))
        writer.add_tensor(p + "ffn_up.weight", w_in(N_FF))
        writer.add_tensor(p + "ffn_down.weight", down.astype(mat_type))
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    output = w(n_vocab, N_EMBD, scale=4.0)
    output[:, 0] = 0.0
    # x normalised dim 0 (~0.1-1): a bias hundreds below any other logit,
    # so no temperature or sampler setting can pick these tokens.
    output[banned, 0] = -1000.0
    writer.add_tensor("output.weight", output)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    digest = hashlib.sha256(open(out, "rb").read()).hexdigest()
    print(f"tiny_gguf: wrote {out} ({os.path.getsize(out)} bytes, {n_vocab} tokens, "
          f"{len(merges)} merges, n_embd {N_EMBD}, n_layer {N_LAYER}, n_ff {N_FF}) sha256 {digest}")


if __name__ == "__main__":
    main()
