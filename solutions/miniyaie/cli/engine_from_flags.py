"""An InferenceEngine from a command's flags: --model, --config, --device, --impl, sampling flags.

Chapter code is imported only after `--impl` is applied, so a command runs
whichever chapters the learner selected (like `pytest --impl`).
"""

from __future__ import annotations

import dataclasses
import sys

from miniyaie.backends.cpu import runtime as cpu_runtime
from miniyaie.cli.args import UsageError, lora_overrides, scheduling_overrides

SAMPLING_FLAGS = ("max_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "seed", "stop")


def apply_impl(args) -> None:
    """Select the trees named by --impl before anything imports chapter code."""
    from miniyaie import _switch

    if getattr(args, "impl", None):
        try:
            _switch.select(args.impl)
        except _switch.ImplError as exc:
            raise UsageError(str(exc)) from None


def build_engine(args, default_max_tokens: int):
    """An InferenceEngine for the command's flags; flags override the --config file, which overrides the defaults."""
    apply_impl(args)
    import torch

    from miniyaie.backends.choose import describe_choice
    from miniyaie.engine import EngineError, InferenceEngine, SamplingParams
    from miniyaie.serving.config_file import EngineSettings, load_settings

    try:
        settings = load_settings(args.config) if args.config else EngineSettings(sampling=SamplingParams(max_tokens=default_max_tokens))
        overrides = {name: getattr(args, name) for name in SAMPLING_FLAGS if getattr(args, name, None) is not None}
        sampling = settings.sampling.with_updates(**overrides)
        device = args.device or settings.device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = getattr(torch, settings.dtype) if settings.dtype else None
        model = args.model or settings.model
        engine_config = settings.engine
        if getattr(args, "attention_backend", None):
            try:
                engine_config = dataclasses.replace(engine_config, attention_backend=args.attention_backend)
            except ValueError as exc:  # EngineConfig names the backends it knows
                raise UsageError(str(exc)) from None
        if getattr(args, "structured_limit", None):  # NAME=VALUE pairs over the --config file's
            pairs = dict(item.partition("=")[::2] for item in args.structured_limit)
            try:
                engine_config = dataclasses.replace(
                    engine_config, structured_limits={**dict(engine_config.structured_limits), **pairs})
            except ValueError as exc:  # names the unknown limit or the bad value
                raise UsageError(str(exc)) from None
        if getattr(args, "tensor_parallel_size", None):
            engine_config = dataclasses.replace(engine_config, tensor_parallel_size=args.tensor_parallel_size)
        overrides = {**scheduling_overrides(args), **lora_overrides(args, dict(getattr(engine_config, "lora_adapters", {})))}
        if "num_speculative_tokens" in overrides and overrides.get("speculative", engine_config.speculative) is None:
            raise UsageError("--num-speculative-tokens is used only with --speculative ngram or draft")
        try:
            engine_config = dataclasses.replace(engine_config, **overrides)
        except ValueError as exc:  # EngineConfig says which setting does not fit (--draft-model without a draft, ...)
            raise UsageError(str(exc)) from None
        if engine_config.speculative == "draft" and engine_config.draft_model is None:
            raise UsageError("--speculative draft needs --draft-model PATH (a smaller model with the same tokenizer)")
        runtime = cpu_runtime.loaded() if device == "cpu" else None
        print(f"Loading {model or 'SmolLM2-135M-Instruct (bundled)'} on {device}"
              + (f" (OpenMP: {runtime['openmp']}, malloc: {runtime['malloc']})" if runtime else "") + " ...",
              file=sys.stderr, flush=True)
        choice = describe_choice(engine_config.attention_backend, device)  # a learner's chapter 0 or 4: which backend runs it
        if choice:
            print(choice, file=sys.stderr, flush=True)
        return InferenceEngine(model, engine_config, sampling_defaults=sampling, device=device, dtype=dtype)
    except EngineError as exc:  # a model that cannot load, or one that does not fit (a draft's tokenizer)
        raise UsageError(str(exc)) from None
    except ValueError as exc:  # chapter 11's AdapterError: an adapter refused at start, named in one line
        if type(exc).__name__ != "AdapterError":
            raise
        raise UsageError(str(exc)) from None
