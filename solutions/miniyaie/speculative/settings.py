"""Chapter 9's engine settings, checked when any of them is set: each refused with one line when it is wrong
or when it would do nothing (a number of drafts without speculative decoding, say)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

METHODS = ("ngram", "draft")
USED_BY = {"num_speculative_tokens": METHODS, "max_speculative_step_tokens": METHODS, "draft_model": ("draft",),
           "prompt_lookup_min": ("ngram",), "prompt_lookup_max": ("ngram",)}


def check_settings(config) -> None:
    """ValueError naming the first speculative setting of `config` (an EngineConfig) that is wrong or unused."""
    from dataclasses import fields

    if config.speculative is not None and config.speculative not in METHODS:
        raise ValueError(f"unknown speculative method {config.speculative!r}; choose from ngram, draft (or none)")
    for f in fields(config):
        uses = USED_BY.get(f.name)
        if uses and config.speculative not in uses and getattr(config, f.name) != f.default:  # set, and it would do nothing
            raise ValueError(f"{f.name} is used only with speculative={' or '.join(map(repr, uses))}")
    if config.prompt_lookup_min > config.prompt_lookup_max:
        raise ValueError(f"prompt_lookup_min ({config.prompt_lookup_min}) is more than prompt_lookup_max ({config.prompt_lookup_max})")
    if config.tensor_parallel_size > 1:
        raise ValueError("speculative decoding does not run with tensor parallelism yet: use one of them")


def with_speculation(config, speculative: str | None, num_speculative_tokens: int | None, draft_model):
    """`config` with InferenceEngine's speculative keywords applied (None: keep the config's); a draft model
    given loaded is passed on by the engine, not stored in the config."""
    if num_speculative_tokens is not None and (config.speculative if speculative is None else speculative) is None:
        raise ValueError("num_speculative_tokens is used only with speculative decoding: give speculative='ngram' or 'draft'")
    return replace(config, speculative=config.speculative if speculative is None else speculative,
                   num_speculative_tokens=config.num_speculative_tokens if num_speculative_tokens is None else num_speculative_tokens,
                   draft_model=str(draft_model) if isinstance(draft_model, (str, Path)) else config.draft_model)
