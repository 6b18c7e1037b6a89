"""Tiny random-weight Llama / Qwen2 / Qwen3 checkpoints, saved like real ones, and the transformers oracle."""

from __future__ import annotations

from pathlib import Path

import torch

COMMON = dict(
    vocab_size=320,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    rms_norm_eps=1e-6,
    initializer_range=0.2,  # peaky logits: greedy argmax has clear winners
)

CONFIGS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "llama-tied-mha": ("LlamaConfig", "LlamaForCausalLM", dict(num_key_value_heads=4, tie_word_embeddings=True)),
    "llama3-rope": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(
            rope_parameters=dict(
                rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                high_freq_factor=4.0, original_max_position_embeddings=32,
            )
        ),
    ),
    "llama-linear-rope": (
        "LlamaConfig", "LlamaForCausalLM", dict(rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=4.0))
    ),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(tie_word_embeddings=True)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=24)),
}


def save_tiny_model(kind: str, directory: Path, seed: int = 0, random_norms: bool = False, **overrides):
    """Save a random-weight model of `kind` (config fields changed by `overrides`) to `directory`; returns the transformers model.

    random_norms: draw every RMSNorm weight around 1 instead of leaving it at ones, so that a forward
    which uses the wrong norm, or puts Qwen3's q/k norms after the rotation, gives other logits.
    """
    import transformers

    config_cls, model_cls, extra = CONFIGS[kind]
    config = getattr(transformers, config_cls)(**{**COMMON, **extra, **overrides})
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():  # biases are zero-initialised; make Qwen2's qkv biases matter
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0, 0.2)
            elif random_norms and name.endswith("norm.weight"):
                param.normal_(1, 0.3)
    model.save_pretrained(directory)
    return model


def transformers_greedy(hf_model, prompt: list[int], max_new_tokens: int) -> list[int]:
    """The oracle: transformers' own greedy generate, one prompt at a time (no padding), never stopping early."""
    hf_model.generation_config.eos_token_id = None
    out = hf_model.generate(
        torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, do_sample=False, pad_token_id=0,
    )
    return out[0, len(prompt):].tolist()
