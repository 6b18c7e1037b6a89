"""A tiny random Llama saved like a real checkpoint, and LoRA adapters for it made and saved by peft (the oracle)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch

COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6, initializer_range=0.2)
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

# name -> LoraConfig settings: ranks, alphas, targets and rslora differ, so a mix-up shows
ADAPTERS = {
    "all-r8": dict(r=8, lora_alpha=16, target_modules=ALL),
    "qv-r2": dict(r=2, lora_alpha=5, target_modules=["q_proj", "v_proj"]),
    "mlp-r4-rslora": dict(r=4, lora_alpha=3, target_modules=["gate_proj", "up_proj", "down_proj"], use_rslora=True),
    "attn-r3": dict(r=3, lora_alpha=7, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]),
    "o-down-r1": dict(r=1, lora_alpha=8, target_modules=["o_proj", "down_proj"]),  # rank 1; alpha PEFT's default
}


def save_tiny_llama(directory: Path, seed: int = 0):
    """A random LlamaForCausalLM (float32) saved to `directory`; returns it (eval mode)."""
    import transformers

    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**COMMON)).eval()
    model.save_pretrained(directory)
    return model


def save_peft_adapter(base, directory: Path, seed: int, **settings) -> None:
    """A peft LoRA adapter of `base` with random non-zero A and B (peft starts B at zero), saved to `directory`."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    peft_model = get_peft_model(copy.deepcopy(base), LoraConfig(lora_dropout=0.0, **settings))
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_A" in name or "lora_B" in name:
                param.normal_(0, 0.3)
    peft_model.save_pretrained(directory)


def peft_merged(base, directory: Path):
    """peft's own model for the adapter in `directory`, merged into a copy of `base` (the oracle)."""
    from peft import PeftModel

    return PeftModel.from_pretrained(copy.deepcopy(base), directory).merge_and_unload().eval()


def edit_config(directory: Path, **changes) -> None:
    """Change the adapter's adapter_config.json in place."""
    path = directory / "adapter_config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))
