"""What chapter 7 plugs into the engine (entry point `tensor_parallel` of `miniyaie.engine_plugins`).

InferenceEngine calls start_tensor_parallel when tensor_parallel_size > 1: it
imports nothing of this chapter itself (engine/plugins.py).
"""

from __future__ import annotations

from pathlib import Path

import torch

from miniyaie.distributed.runtime import TensorParallelRuntime
from miniyaie.engine.errors import ModelLoadError
from miniyaie.model import LoadedModel
from miniyaie.model import ModelLoadError as ChapterZeroModelLoadError
from miniyaie.model.loader import eos_token_ids, load_tokenizer, resolve_model_path


def start_tensor_parallel(model: str | Path | None, config, device: str | None,
                          dtype: torch.dtype | None) -> tuple[LoadedModel, TensorParallelRuntime]:
    """Rank 0's shard of the model and the runtime of the other ranks, for config.tensor_parallel_size ranks.

    The runtime attaches to the engine (attach(llm, attention_backend)) and stops the other ranks (close()).
    """
    device = device or "cpu"
    dtype = dtype or (torch.bfloat16 if str(device).startswith("cuda") else torch.float32)
    try:
        path = resolve_model_path(None if model is None else str(model))
        tokenizer = load_tokenizer(path)
        runtime = TensorParallelRuntime.start(path, config.tensor_parallel_size, dtype, device)
    except ChapterZeroModelLoadError as exc:
        raise ModelLoadError(str(exc)) from exc
    return LoadedModel(runtime.model, tokenizer, eos_token_ids(path, tokenizer), path), runtime
