"""Turning a scheduled step into tensors, running the model, and sampling."""

from __future__ import annotations

import torch

from miniyaie.model import AttentionMetadata, CausalLM, KVCache, SamplingParams, sample
from miniyaie.paged import copy_blocks
from miniyaie.scheduler import SchedulerOutput


class ModelRunner:
    def __init__(self, model: CausalLM, pool: KVCache, memory):
        self.model, self.pool, self.memory = model, pool, memory
        self.device = model.lm_head.weight.device

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

    def run(
        self, out: SchedulerOutput, params: dict[str, SamplingParams], generators: dict[str, torch.Generator | None]
    ) -> dict[str, int]:
        """One forward pass over the step; the next token of every chunk that reaches its end."""
        input_ids, positions, meta = self.prepare(out)
        hidden = self.model(input_ids, positions, self.pool, meta)
        last_rows = torch.tensor(meta.query_lens, device=self.device).cumsum(0) - 1
        rows = [i for i, chunk in enumerate(out.chunks) if chunk.samples_next_token]
        if not rows:
            return {}
        request_ids = [out.chunks[i].request.request_id for i in rows]
        logits = self.model.compute_logits(hidden[last_rows[rows]])
        tokens = logits.argmax(dim=-1)  # greedy for every row, in one op
        for row, rid in enumerate(request_ids):
            if params[rid].temperature > 0:
                tokens[row] = sample(logits[row : row + 1], params[rid], generators[rid])
        return dict(zip(request_ids, tokens.tolist()))
