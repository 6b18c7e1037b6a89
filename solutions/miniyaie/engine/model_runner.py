"""Turning a scheduled step into tensors, running the model, and sampling."""

from __future__ import annotations

import torch

from miniyaie.engine.sampler import SampledToken, Sampler, SamplingRow
from miniyaie.backends.step_threads import ThreadChoice, threads_for_step
from miniyaie.model import AttentionMetadata, CausalLM, KVCache
from miniyaie.paged import copy_blocks
from miniyaie.scheduler import SchedulerOutput


class ModelRunner:
    def __init__(self, model: CausalLM, pool: KVCache, memory):
        self.model, self.pool, self.memory = model, pool, memory
        self.device = model.lm_head.weight.device
        self.sampler, self.thread_choice = Sampler(), ThreadChoice()  # the choice: one CPU thread or all, per step size
        self.decode_graphs = None  # a DecodeGraphRunner (miniyaie/backends/cuda_graphs.py) when decode steps replay graphs

    # ANCHOR: prepare
    def prepare(self, out: SchedulerOutput) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
        """Pack every chunk of the step into one batch: ids, positions, and where K/V live.

        Returns (input_ids [T], positions [T], metadata) for the T = sum of the
        chunks' num_tokens tokens, chunk after chunk in `out.chunks` order: a chunk
        (request, start, num_tokens) contributes its tokens start .. start +
        num_tokens - 1 (`chunk.token_ids`) at those positions, and the metadata
        (from the paged memory, chapter 2) says where each sequence's K/V live.
        Before it returns, the pool holds every block copy that copy-on-write
        queued: the forward pass will write into those private copies.
        """
        # Nudge: one flat batch, chunk after chunk; a chunk's positions start where its computed tokens end.
        # Hint 1: The model does not know about requests: it sees one long row of tokens, each with
        #   its own position (for rotary embeddings) and the metadata that says which sequence it
        #   belongs to and where its K/V go. A chunk continues its request at `start` (a cached
        #   prefix or earlier chunks came before), so its positions are not 0-based. A shared
        #   block that a request is about to write was split off by the memory (chapter 2); its
        #   K/V must be copied into the new block before anything writes there.
        # Hint 2: Concatenate every chunk's token_ids; concatenate range(start, start + num_tokens)
        #   of every chunk; ask self.memory.attention_metadata for the (request id, start, end)
        #   of every chunk, on self.device; copy the queued blocks (take_block_copies) in the
        #   pool with copy_blocks; return the ids and positions as int64 tensors and the metadata.
        # Hint 3:
        #   ids = [t for c in chunks for t in c.token_ids]
        #   positions = [p for c in chunks for p in range(c.start, c.start + c.num_tokens)]
        #   meta = memory.attention_metadata([(c.request.request_id, c.start, c.start + c.num_tokens) for c in chunks], device)
        #   copy_blocks(pool, memory.take_block_copies(), memory.block_size)
        #   return int64 tensors of ids and positions, meta
        # BEGIN SOLUTION 5.9: Pack the step into one batch
        input_ids = [t for chunk in out.chunks for t in chunk.token_ids]
        positions = [p for chunk in out.chunks for p in range(chunk.start, chunk.start + chunk.num_tokens)]
        meta = self.memory.attention_metadata(
            [(c.request.request_id, c.start, c.start + c.num_tokens) for c in out.chunks], self.device
        )
        # Copy-on-write: blocks the memory split off a shared block get its K/V before we write.
        copy_blocks(self.pool, self.memory.take_block_copies(), self.memory.block_size)
        as_tensor = lambda xs: torch.tensor(xs, dtype=torch.int64, device=self.device)  # noqa: E731
        return as_tensor(input_ids), as_tensor(positions), meta
        # END SOLUTION
    # ANCHOR_END: prepare

    # ANCHOR: run
    def run(self, out: SchedulerOutput, rows: dict[str, SamplingRow], fanout: dict[str, list[str]] | None = None) -> dict[str, SampledToken]:
        """One forward pass over the step; the next token of every chunk that reaches its end.

        `rows` holds each request's sampling settings. `fanout` maps a request
        to extra requests sampled from the same logits row (the other
        completions of n > 1, forked right after the prompt's prefill).
        Returns request id -> SampledToken for exactly the requests that sample (none: {});
        the model runs even then (the chunks' K/V must be written). The LM head runs only
        on the rows that sample (self.forward), and the sampler once for all of them.
        """
        # Nudge: which rows are worth a vocabulary-wide LM head, and must the model run when no row is?
        # Hint 1: The whole step is one forward pass over the packed batch (prepare), but only the
        #   rows of chunks that reach their end become logits (sampling_rows): computing the LM
        #   head for every prompt token would cost a vocabulary-wide matmul per token for
        #   nothing. Even a step in which nobody samples must run the model: its chunks' K/V
        #   must be written.
        # Hint 2: prepare(out); sampling_rows(out, fanout or {}); forward(ids, positions, meta,
        #   rows); if no request picked, {}; else one sampler call with the picked requests' rows
        #   in order, zipped back to their ids.
        # Hint 3:
        #   input_ids, positions, meta = self.prepare(out); rows_of_hidden, picked = self.sampling_rows(out, fanout or {})
        #   logits = self.forward(input_ids, positions, meta, rows_of_hidden)
        #   return {} if not picked else dict(zip(picked, self.sampler(logits, [rows[rid] for rid in picked])))
        # BEGIN SOLUTION 5.9: Pack the step into one batch
        input_ids, positions, meta = self.prepare(out)
        rows_of_hidden, picked_ids = self.sampling_rows(out, fanout or {})
        logits = self.forward(input_ids, positions, meta, rows_of_hidden)
        if not picked_ids:
            return {}
        sampled = self.sampler(logits, [rows[rid] for rid in picked_ids])  # every row in one pass
        return dict(zip(picked_ids, sampled))
        # END SOLUTION
    # ANCHOR_END: run

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                logit_rows: list[int]) -> torch.Tensor | None:
        """The model over the packed batch; float32 logits of the hidden rows `logit_rows` (None if none).

        The one call tensor parallelism (chapter 7) replays on every rank. A decode step that
        self.decode_graphs accepts replays its recorded graph; any other step runs the model.
        """
        with threads_for_step(input_ids.numel(), self.device, self.thread_choice):  # one thread or all: the faster
            hidden = self.decode_graphs.run(input_ids, positions, meta) if self.decode_graphs is not None else None
            if hidden is None:
                hidden = self.model(input_ids, positions, self.pool, meta)
            return self.model.compute_logits(hidden[logit_rows]) if logit_rows else None

    def check_health(self) -> None:
        """Raise if this runner can no longer run steps (one process cannot fail apart from itself)."""

    # ANCHOR: sampling_rows
    def sampling_rows(self, out: SchedulerOutput, fanout: dict[str, list[str]]) -> tuple[list[int], list[str]]:
        """Which rows of the packed batch become logits, and for whom: (row indexes, request ids), in step.

        Only a chunk that reaches the end of its request's known tokens
        (`chunk.samples_next_token`: a decode, or a prompt's last chunk) samples;
        its row is the chunk's last token in the packed batch of `prepare`. The
        completions in fanout[request id] (n > 1, forked right after the prompt)
        sample from that same row, listed right after their request. A step in
        which no chunk samples returns two empty lists.
        """
        # Nudge: the batch is the chunks end to end, and only a chunk that completes its known tokens samples.
        # Hint 1: The packed batch is the chunks one after the other, so chunk i ends at row
        #   (sum of num_tokens of chunks 0..i) - 1. A chunk in the middle of a long prompt
        #   computes K/V but its last token's next token is already known: it must not sample
        #   (sampling it would append a made-up token to the prompt). A request's forked
        #   completions reuse its row: the prompt is the same, so are the logits.
        # Hint 2: Keep a running end of the rows. For each chunk, add its num_tokens; if it samples,
        #   record (end - 1, its request id) and then (end - 1, child) for each of its fanout
        #   children. Return the two lists.
        # Hint 3:
        #   rows, ids, end = [], [], 0
        #   for chunk in out.chunks:
        #       end += chunk.num_tokens
        #       if chunk.samples_next_token:
        #           for rid in [chunk.request.request_id, *fanout.get(chunk.request.request_id, [])]: rows.append(end - 1); ids.append(rid)
        #   return rows, ids
        # BEGIN SOLUTION 5.9: Pack the step into one batch
        rows, ids, end = [], [], 0
        for chunk in out.chunks:
            end += chunk.num_tokens
            if chunk.samples_next_token:
                rid = chunk.request.request_id
                for picked in [rid, *fanout.get(rid, [])]:
                    rows.append(end - 1)
                    ids.append(picked)
        return rows, ids
        # END SOLUTION
    # ANCHOR_END: sampling_rows
