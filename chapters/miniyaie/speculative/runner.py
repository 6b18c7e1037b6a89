"""Speculative decoding as the engine sees it: its model runner, with drafts proposed and verified in `run`.

The engine asks for `speculative_runner` through this chapter's plugin (engine_plugin.py), when a setting asks.
"""

from __future__ import annotations

from miniyaie.engine.sampler import SamplingRow
from miniyaie.scheduler import SchedulerOutput
from miniyaie.speculative.ngram import NgramProposer
from miniyaie.speculative.step import PromptLookup, Speculation


class SpeculativeRunner:
    """The engine's model runner with speculation in its `run`; every other attribute is the runner's own."""

    def __init__(self, runner, speculation: Speculation):
        self._runner, self.speculation = runner, speculation

    def run(self, out: SchedulerOutput, rows: dict[str, SamplingRow], fanout: dict[str, list[str]] | None = None):
        return self.speculation.run(self._runner, out, rows, fanout)

    def __getattr__(self, name: str):
        return getattr(self._runner, name)


def speculative_runner(config, runner, memory, counters: dict[str, int], draft_model=None) -> SpeculativeRunner:
    """`runner` wrapped to speculate as `config` says (speculative "ngram" or "draft").

    A draft model must share the target's vocabulary (DraftModelError, a ValueError, otherwise; the caller compares the
    tokenizers, which the model does not know). It gets a pool of its own, as many blocks as the target's.
    """
    if config.speculative == "draft":
        from miniyaie.backends.choose import use_backend
        from miniyaie.speculative.draft_model import DraftModelError, DraftModelProposer

        if draft_model is None:
            raise DraftModelError("speculative decoding with a draft model needs one: give draft_model")
        target_vocab, draft_vocab = runner.model.config.vocab_size, draft_model.config.vocab_size
        if draft_vocab != target_vocab:
            raise DraftModelError(f"the draft model's vocabulary has {draft_vocab} tokens, the target's {target_vocab}: "
                                  "a draft model must share the target's tokenizer")

        use_backend(draft_model, config.attention_backend, draft_model.lm_head.weight.device)  # as the target's
        long_prefill = config.long_prefill_token_threshold or config.max_num_batched_tokens  # the target's bound
        proposer = DraftModelProposer(draft_model, memory.num_blocks, memory.block_size,
                                      min(long_prefill, config.max_num_batched_tokens))
    else:
        proposer = PromptLookup(NgramProposer(config.prompt_lookup_min, config.prompt_lookup_max))
    speculation = Speculation(proposer, config.num_speculative_tokens, memory, counters, config.max_speculative_step_tokens)
    return SpeculativeRunner(runner, speculation)
