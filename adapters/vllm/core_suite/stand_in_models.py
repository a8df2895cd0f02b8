"""Model configurations for the model ids vLLM's ``tests/v1/core`` names, written locally.

Those tests build a ``ModelConfig`` for a Hugging Face model id (``facebook/opt-125m``, vLLM's
default ``Qwen/Qwen3-0.6B``, ``Qwen/Qwen1.5-7B``, ``llava-hf/llava-1.5-7b-hf``) only to size the
scheduler: they read its ``config.json``, never weights or a tokenizer. The hub cannot be reached
here, so each id gets a ``config.json`` written by transformers' own config class for that
architecture, with the dimensions the real checkpoint publishes, and vLLM's own redirect
(``VLLM_MODEL_REDIRECT_PATH``) sends the id to it — as vLLM's suite itself does for the tests that
write a bare OPT ``config.json`` into ``tmp_path``.
"""

from __future__ import annotations

import json
from pathlib import Path


def _configs() -> dict:
    from transformers import LlamaConfig, LlavaConfig, OPTConfig, Qwen2Config, Qwen3Config

    return {
        # OPTConfig's defaults are opt-125m's dimensions.
        "facebook/opt-125m": OPTConfig(architectures=["OPTForCausalLM"], torch_dtype="float16"),
        # Qwen2Config's defaults are Qwen1.5-7B's (hidden 4096, 32 layers, 32 heads, 32k positions).
        "Qwen/Qwen1.5-7B": Qwen2Config(architectures=["Qwen2ForCausalLM"], torch_dtype="bfloat16"),
        "Qwen/Qwen3-0.6B": Qwen3Config(
            architectures=["Qwen3ForCausalLM"],
            vocab_size=151936,
            hidden_size=1024,
            intermediate_size=3072,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            max_position_embeddings=40960,
            tie_word_embeddings=True,
            torch_dtype="bfloat16",
        ),
        # LlavaConfig's default vision tower is llava-1.5's CLIP ViT-L/14 at 336 px.
        "llava-hf/llava-1.5-7b-hf": LlavaConfig(
            architectures=["LlavaForConditionalGeneration"],
            text_config=LlamaConfig(vocab_size=32064, max_position_embeddings=4096).to_dict(),
            image_token_index=32000,
            torch_dtype="float16",
        ),
    }


def write(directory: Path) -> Path:
    """Write one folder per model id and the redirect file naming them; returns its path."""
    redirect = {}
    for model_id, config in _configs().items():
        folder = directory / model_id.replace("/", "--")
        config.save_pretrained(folder)
        redirect[model_id] = str(folder)
    path = directory / "redirect.json"
    path.write_text(json.dumps(redirect, indent=1))
    return path
