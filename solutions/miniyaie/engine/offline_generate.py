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
        # Nudge: the engine batches what it holds, and events come mixed: when do prompts go in, and where does a token go?
        # Hint 1: The engine batches what it holds, so every prompt is added before the first step.
        #   Each step returns events for many requests, in no particular order: gather each
        #   request's tokens by its id, and keep the finish reason of its last event. The events
        #   of other completions (n > 1) are not asked for here.
        # Hint 2: ids = add_request for each prompt (with its per_prompt params); one Generation([], "") per id. While
        #   has_unfinished: for each event of step(): raise its error if any; if its id is one of
        #   ours, append the token and record a finish_reason when there is one. Return them in
        #   the ids' order.
        # Hint 3:
        #   ids = [self.add_request(p, q, eos_token_ids) for p, q in zip(prompts, per_prompt)]; outputs = {rid: Generation([], "")}
        #   while self.has_unfinished(): for event in self.step(): (raise event.error); append; finish_reason
        #   return [outputs[rid] for rid in ids]
        # BEGIN SOLUTION 5.11: The engine step
        ids = [self.add_request(p, q, eos_token_ids) for p, q in zip(prompts, per_prompt)]
        outputs = {rid: Generation([], "") for rid in ids}
        while self.has_unfinished():
            for event in self.step():
                if event.error is not None:
                    raise event.error
                if event.request_id in outputs:
                    outputs[event.request_id].token_ids.append(event.token_id)
                    if event.finish_reason:
                        outputs[event.request_id].finish_reason = event.finish_reason
        return [outputs[rid] for rid in ids]
        # END SOLUTION
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
