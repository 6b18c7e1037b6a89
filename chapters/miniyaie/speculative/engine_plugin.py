"""What chapter 9 plugs into the engine (entry point `speculative` of `miniyaie.engine_plugins`).

The engine asks for it when a speculative setting is given (engine/plugins.py): it imports nothing of
this chapter itself. Its settings are checked when any of them is set, each refused with one line when it
is wrong or when it would do nothing (a number of drafts without speculative decoding, say).
"""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

from miniyaie.speculative.draft_model import load_draft_model
from miniyaie.speculative.runner import speculative_runner

__all__ = ["check_settings", "load_draft_model", "speculative_runner", "speculative_stats", "with_speculation"]

METHODS = ("ngram", "draft")
USED_BY = {"num_speculative_tokens": METHODS, "max_speculative_step_tokens": METHODS, "draft_model": ("draft",),
           "prompt_lookup_min": ("ngram",), "prompt_lookup_max": ("ngram",)}


def check_settings(config) -> None:
    """ValueError naming the first speculative setting of `config` (an EngineConfig) that is wrong or unused."""
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


def speculative_stats(method: str | None, c: dict[str, int]) -> dict:
    """What speculative decoding reports (get_stats, /stats, /metrics): how many drafts, how many kept,
    tokens per verification."""
    drafts, accepted, verified = c["draft_tokens"], c["accepted_draft_tokens"], c["verified_steps"]
    return {"method": method, "draft_tokens": drafts, "accepted_draft_tokens": accepted, "verified_steps": verified,
            "off_steps": c["speculation_off_steps"],  # steps that did not draft: a prefill, or too many decoding
            "acceptance_rate": accepted / drafts if drafts else 0.0,
            # tokens a request emits per verification: the drafts kept plus the target's own token
            "mean_accepted_length": (accepted + verified) / verified if verified else 0.0}
