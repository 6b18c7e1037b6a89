"""What chapter 11 plugs into the engine (entry point `lora` of `miniyaie.engine_plugins`).

The engine asks for it only when EngineConfig.lora_adapters names adapters: it imports nothing of this
chapter itself. `check_settings` refuses a bad setting with one line when the config is made; `attach`
checks every adapter's files against the model, wraps the model's projections (lora/wrap.py) and returns the
AdapterResidency (residency.py) that the engine calls around each step.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from miniyaie.lora_serving.residency import AdapterResidency

__all__ = ["AdapterResidency", "attach", "check_settings"]


def check_settings(config) -> dict[str, str]:
    """`config.lora_adapters` (name -> path, or (name, path) pairs) as a dict; ValueError naming the first problem:
    an empty or repeated name, a path that is not a string, and settings LoRA does not run with yet."""
    given = config.lora_adapters
    pairs = list(given.items()) if isinstance(given, Mapping) else list(given)
    adapters: dict[str, str] = {}
    for pair in pairs:
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise ValueError(f"lora_adapters must map names to PEFT directories, got the entry {pair!r}")
        name, path = pair
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"lora_adapters: an adapter's name must be a non-empty string, got {name!r}")
        if name in adapters:
            raise ValueError(f"lora_adapters: the name {name!r} is used twice")
        if not isinstance(path, (str, Path)) or not str(path):
            raise ValueError(f"lora_adapters: adapter {name!r} needs a directory path, got {path!r}")
        adapters[name] = str(path)
    if config.speculative is not None:
        raise ValueError("lora_adapters does not run with speculative decoding yet: use one of them")
    if config.tensor_parallel_size > 1:
        raise ValueError("lora_adapters does not run with tensor parallelism yet: use one of them")
    if config.overlap_schedule:
        raise ValueError("lora_adapters does not run with overlap_schedule yet: a step's adapter rows are set on the host")
    return adapters


def attach(engine) -> AdapterResidency:
    """The adapters of engine.config served by `engine` (an LLMEngine whose backend is chosen): every adapter's
    files read and checked now (AdapterError naming the first bad one), none of their tensors kept."""
    config = engine.config
    return AdapterResidency(engine, config.lora_adapters, config.max_loras, config.max_lora_rank)
