"""Turning a scheduled step into tensors, running the model, and sampling."""

from __future__ import annotations

import torch

from miniyaie.engine.sampler import SampledToken, Sampler, SamplingRow
from miniyaie.model import AttentionMetadata, CausalLM, KVCache
from miniyaie.paged import copy_blocks
from miniyaie.scheduler import SchedulerOutput


class ModelRunner:
    def __init__(self, model: CausalLM, pool: KVCache, memory):
        self.model, self.pool, self.memory = model, pool, memory
        self.device = model.lm_head.weight.device
        self.sampler = Sampler()

    # ANCHOR: prepare
    def prepare(self, out: SchedulerOutput) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
        """Pack every chunk of the step into one batch: ids, positions, and where K/V live."""
        input_ids = [t for chunk in out.chunks for t in chunk.token_ids]
        positions = [p for chunk in out.chunks for p in range(chunk.start, chunk.start + chunk.num_tokens)]
        meta = self.memory.attention_metadata(
            [(c.request.request_id, c.start, c.start + c.num_tokens) for c in out.chunks], self.device
        )
        # Copy-on-write: blocks the memory split off a shared block get its K/V before we write.
        copy_blocks(self.pool, self.memory.take_block_copies(), self.memory.block_size)
        as_tensor = lambda xs: torch.tensor(xs, dtype=torch.int64, device=self.device)  # noqa: E731
        return as_tensor(input_ids), as_tensor(positions), meta
    # ANCHOR_END: prepare

    def run(self, out: SchedulerOutput, rows: dict[str, SamplingRow], fanout: dict[str, list[str]] | None = None) -> dict[str, SampledToken]:
        """One forward pass over the step; the next token of every chunk that reaches its end.

        `rows` holds each request's sampling settings. `fanout` maps a request
        to extra requests sampled from the same logits row (the other
        completions of n > 1, forked right after the prompt's prefill).
        """
        input_ids, positions, meta = self.prepare(out)
        hidden = self.model(input_ids, positions, self.pool, meta)
        last_rows = torch.tensor(meta.query_lens, device=self.device).cumsum(0) - 1
        picks = []  # (row of hidden, request id)
        for i, chunk in enumerate(out.chunks):
            if chunk.samples_next_token:
                rid = chunk.request.request_id
                picks += [(i, rid)] + [(i, child) for child in (fanout or {}).get(rid, [])]
        if not picks:
            return {}
        logits = self.model.compute_logits(hidden[last_rows[[i for i, _ in picks]]])
        sampled = self.sampler(logits, [rows[rid] for _, rid in picks])  # every row in one pass
        return {rid: token for (_, rid), token in zip(picks, sampled)}
