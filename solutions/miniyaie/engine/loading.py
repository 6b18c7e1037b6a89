"""Where the engine's model comes from: the bundled model, a local directory, a hub id, or one already loaded."""

from __future__ import annotations

from pathlib import Path

import torch

from miniyaie.backends.choose import prepare_backend
from miniyaie.engine.config import EngineConfig
from miniyaie.engine.errors import ModelLoadError
from miniyaie.engine.plugins import QUANTIZATION, TENSOR_PARALLEL, plugin
from miniyaie.model import LoadedModel, load
from miniyaie.model import ModelLoadError as ChapterZeroModelLoadError


def load_model(model: str | Path | LoadedModel | None, config: EngineConfig, device: str | None,
               dtype: torch.dtype | None) -> LoadedModel:
    """The model to serve; bfloat16 on a GPU and float32 on a CPU unless `dtype` says otherwise."""
    if isinstance(model, LoadedModel):
        return model
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    prepare_backend(config.attention_backend, device)  # a CPU triton backend must set up Triton before the load imports it
    dtype = dtype or (torch.bfloat16 if str(device).startswith("cuda") else torch.float32)
    source = None if model is None else str(model)
    try:  # weights in blocks: chapter 10's plugin loads them (what "auto" means: EngineConfig.quantization)
        if config.quantization != "none":
            return plugin(QUANTIZATION)(source, config.quantization, dtype, device)
        return load(source, dtype=dtype, device=device)
    except ChapterZeroModelLoadError as exc:
        raise ModelLoadError(str(exc)) from exc


def start_tensor_parallel(model: str | Path | LoadedModel | None, config: EngineConfig, device: str | None,
                          dtype: torch.dtype | None):
    """Rank 0's shard of the model and the runtime of the other ranks, for tensor_parallel_size > 1: chapter 7's
    plugin starts them (engine/plugins.py), and PluginMissingError says so when none is installed."""
    if isinstance(model, LoadedModel):
        raise ValueError("with tensor_parallel_size > 1 every rank loads its own shard: give a model name or path, "
                         "not a loaded model")
    return plugin(TENSOR_PARALLEL)(model, config, device, dtype)


def display_name(model: str | Path | LoadedModel | None, loaded: LoadedModel) -> str:
    """The name the engine reports (and a server serves) for its model."""
    if model in (None, "smollm2"):
        return "SmolLM2-135M-Instruct"
    return str(model) if not isinstance(model, LoadedModel) else loaded.path.name
