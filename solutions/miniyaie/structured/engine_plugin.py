"""What chapter 8 plugs into the engine (entry point `structured_output` of `miniyaie.engine_plugins`).

The engine calls these when it needs structured output: it imports nothing of
this chapter itself (engine/plugins.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from miniyaie.structured.constraints import Constraints
from miniyaie.structured.limits import Limits
from miniyaie.structured.vocabulary import Vocabulary


def check_limits(limits: dict) -> None:
    """Raise a ValueError naming an unknown limit or a bad value (EngineConfig.structured_limits)."""
    Limits.parse(limits)


def vocabulary(tokenizer, eos_token_ids: Sequence[int]) -> Vocabulary:
    """The tokenizer's tokens as bytes."""
    return Vocabulary.from_tokenizer(tokenizer, eos_token_ids)


def constraints(vocabulary: Vocabulary | Callable[[], Vocabulary] | None, model_vocab_size: int, limits: dict) -> Constraints:
    """The guides of an engine's constrained requests, under `limits` (name -> value; unnamed ones keep their defaults)."""
    return Constraints(vocabulary, model_vocab_size, Limits.parse(limits))
