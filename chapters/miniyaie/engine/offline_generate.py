"""Offline generation: a list of prompts in, every prompt's tokens out (LLMEngine.generate).

A mixin of LLMEngine, kept apart because it is a client of the engine's step, not part of it.
"""

from __future__ import annotations

from collections.abc import Sequence

from miniyaie.engine.errors import InvalidRequestError
from miniyaie.engine.sampling_params import SamplingParams
from miniyaie.model import Generation
from miniyaie.model import SamplingParams as BasicSamplingParams


class OfflineGeneration:
    # ANCHOR: offline_generate
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams | BasicSamplingParams | None = None,
        eos_token_ids: Sequence[int] = (),
        adapter: str | Sequence[str | None] | None = None,
    ) -> list[Generation]:
        """Run every prompt to completion, all in the same batches; outputs in prompt order (completion 0
        of each when n > 1: the others run, and are left out). A failed request's error (an event
        that carries one) is raised. `adapter` (chapter 11): one LoRA adapter's name for every prompt, or
        one name (or None) per prompt; per_prompt[i] is prompt i's params with it (given)."""
        per_prompt = params_per_prompt(params, adapter, len(prompts))
        # Idea: the engine batches what it holds, and events come mixed: when do prompts go in, and where does a token go?
        # Stuck? `miniyaie hint 5.11` prints hints, one level at a time.
        # TODO(Task 5.11): The engine step. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 11: The engine step — see book/src/ch05_engine_loop.md')
    # ANCHOR_END: offline_generate


def params_per_prompt(params, adapter, count: int) -> list:
    """`params` for each of `count` prompts, with `adapter` (a name for all, or one name or None per prompt) set."""
    if adapter is None:
        return [params] * count
    names = [adapter] * count if isinstance(adapter, str) else list(adapter)
    if len(names) != count:
        raise InvalidRequestError(f"adapter: {len(names)} names for {count} prompts (give one name, or one per prompt)")
    base = SamplingParams.coerce(params)
    return [base if name is None else base.with_updates(adapter=name) for name in names]
