#!/usr/bin/env python3
"""Make a tiny random-weight Llama with a byte-level BPE tokenizer and a Llama-3-style chat
template, for running a real vLLM on CPU in tests (docs/background.md §5). Offline, deterministic, seconds.

    python adapters/vllm/make_tiny_model.py DIR
    python adapters/vllm/make_tiny_model.py --ends-answers DIR   # the variant that ends its answers
    python adapters/vllm/make_tiny_model.py --size prefill-heavy DIR   # prefill priced as on a GPU

The weights are random (seeded), so the model's text is noise; what matters is that vLLM loads it,
tokenizes chat prompts like a Llama-3 model (system prompt and tools first, so an agent's anchor is
a shared prefix), and runs prefill and decode through its real block pool and prefix cache.
Running it again with the same DIR leaves identical files.

`--ends-answers` makes the variant whose answers end, for agent SDKs that refuse an answer cut at
`max_tokens` (the plain model never ends one, and most of what it says is ids past the trained
vocabulary, which decode to nothing). Only the (untied) output layer differs: the rows of ids the
tokenizer never assigned are zero, the rows of real tokens are scaled up (logits of a few units, so
a real token beats the zeros), and the end-of-turn row is a random direction scaled so that its
logit is about ±EOS_SCALE — `<|eot_id|>` wins at about two steps in five, and an answer is a few
tokens of text, then its end.

`--size prefill-heavy` makes a wider, deeper model (SIZES) for an engine whose prefill costs: the
tiny model prefills its whole test cache in a quarter of a second, less than an agent's pause
between calls, so recomputing an evicted context costs it nothing that matters; the heavy one
takes ~0.2 ms a token (~4 s for a 600-block cache), as recomputing a cache outlasts a tool pause on
a GPU serving an 8B model. `adapters/vllm/eval/prefill_ratio.py` measures what a size costs on the
machine at hand. Its context window is 8,192 tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

VOCAB_SIZE = 4096
SPECIAL_TOKENS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
]

# Llama-3 layout: <|begin_of_text|>, then each message as header + content + <|eot_id|>. Tools are
# rendered as a system block right after the system prompt, so system + tools form the prefix an
# agent's requests share (its anchor).
CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{%- if message['content'] is string %}{%- set content = message['content'] %}"
    "{%- else %}{%- set content = message['content'] | map(attribute='text') | join('') %}{%- endif %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + content | trim + '<|eot_id|>' }}"
    "{%- if loop.first and message['role'] == 'system' and tools %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\nTools: ' + (tools | tojson) + '<|eot_id|>' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)


def corpus(seed: int = 0, lines: int = 4000) -> list[str]:
    """Deterministic English-like text to train the tokenizer on (no downloads)."""
    rng = random.Random(seed)
    words = (
        "the agent tool call plan search code review answer question system user assistant "
        "you are a helpful planner coder critic researcher writer summarize the following task "
        "step result error retry function argument json file python test pass fail because "
        "and or not with from into over under before after when then if else return value "
        "cache block prefix token model request session policy score predict observe act "
        "0 1 2 3 4 5 6 7 8 9 10 100 1000 { } [ ] ( ) : , . ? ! \" ' - _ / = + * # @"
    ).split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(4, 24))) for _ in range(lines)]


def make_tokenizer(out: Path, context: int = 2048):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        pad_token="<|end_of_text|>",
        model_max_length=context,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


# hidden size, layers, context window. The tiny model is the tests' engine; `prefill-heavy` was
# sized by measuring (prefill_ratio.py), not by arithmetic: its figures are in docs/results-vllm.md.
SIZES = {
    "tiny": dict(hidden=128, layers=2, context=2048),
    "prefill-heavy": dict(hidden=256, layers=6, context=8192),
}

EOS_SCALE = 60.0
TEXT_SCALE = 20.0


def make_model(out: Path, tokenizer, ends_answers: bool = False, size: str = "tiny") -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    shape = SIZES[size]
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=shape["hidden"],
        intermediate_size=2 * shape["hidden"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["hidden"] // 32,
        num_key_value_heads=shape["hidden"] // 32,
        head_dim=32,
        max_position_embeddings=shape["context"],
        rms_norm_eps=1e-5,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    if ends_answers:
        generator = torch.Generator().manual_seed(1)
        direction = torch.randn(config.hidden_size, generator=generator)
        assigned = len(tokenizer)
        with torch.no_grad():
            weight = model.lm_head.weight
            weight[assigned:] = 0.0
            weight[:assigned] *= TEXT_SCALE
            # The final norm leaves hidden states of norm ~sqrt(hidden): a unit direction gives a
            # logit ~N(0, 1) before the scale.
            weight[tokenizer.convert_tokens_to_ids("<|eot_id|>")] = direction / direction.norm() * EOS_SCALE
    model.save_pretrained(out, safe_serialization=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="directory to write the model into")
    parser.add_argument("--ends-answers", action="store_true",
                        help="the variant whose end-of-turn token wins about half the steps")
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny",
                        help="tiny (the tests' engine) or prefill-heavy (prefill priced as on a GPU)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer(args.out, SIZES[args.size]["context"])
    make_model(args.out, tokenizer, ends_answers=args.ends_answers, size=args.size)
    files = sorted(p.name for p in args.out.iterdir())
    print(json.dumps({"model_dir": str(args.out), "files": files}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
