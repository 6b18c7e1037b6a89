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
        # Idea: one flat batch, chunk after chunk; a chunk's positions start where its computed tokens end.
        # Stuck? `miniyaie hint 5.9` prints hints, one level at a time.
        # TODO(Task 5.9): Pack the step into one batch. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 9: Pack the step into one batch — see book/src/ch05_engine_loop.md')
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
        # Idea: which rows are worth a vocabulary-wide LM head, and must the model run when no row is?
        # Stuck? `miniyaie hint 5.9` prints hints, one level at a time.
        # TODO(Task 5.9): Pack the step into one batch. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 9: Pack the step into one batch — see book/src/ch05_engine_loop.md')
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
        # Idea: the batch is the chunks end to end, and only a chunk that completes its known tokens samples.
        # Stuck? `miniyaie hint 5.9` prints hints, one level at a time.
        # TODO(Task 5.9): Pack the step into one batch. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 9: Pack the step into one batch — see book/src/ch05_engine_loop.md')
    # ANCHOR_END: sampling_rows
