"""The sampler: every row of a step is sampled in one vectorised pass.

Each row carries its own parameters. They become [batch] tensors, and the
whole batch goes through the same stages, each skipped when no row needs it:

    raw logits ──> logprobs reported to the user (the model's own distribution)
        │
        ├─ penalties      repetition (prompt + output), presence and frequency (output)
        ├─ min_tokens     end-of-sequence / stop tokens masked while too short
        ├─ greedy rows    argmax, done
        └─ temperature ─> top_k ─> top_p ─> min_p ─> one draw per row

The draw is inverse-CDF sampling with one uniform number per row, taken
from the row's own generator when the request has a seed: the same seed
gives the same tokens whatever else shares the batch, and the batch still
costs one cumsum and one searchsorted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from miniyaie.engine.sampling_params import SamplingParams
from miniyaie.engine.sampling_stages import apply_penalties, draw, token_histories
from miniyaie.engine.top_columns import sample_top_columns


@dataclass
class SamplingRow:
    """One row of a step's logits: whose it is and what it asks for."""

    params: SamplingParams
    prompt_token_ids: Sequence[int]
    output_token_ids: Sequence[int]
    stop_token_ids: Sequence[int] = ()  # end-of-sequence + stop ids: masked before min_tokens
    generator: torch.Generator | None = None  # set for seeded requests
    allowed: torch.Tensor | None = None  # [V] bool: structured output's mask (chapter 8); None = every token


@dataclass
class SampledToken:
    token_id: int
    logprob: float | None = None  # of the chosen token under the model (when asked for)
    top_logprobs: list[tuple[int, float]] | None = None  # the most likely tokens, best first


class Sampler:
    """Turns a step's logits [B, V] and one SamplingRow per row into one SampledToken per row."""

    # ANCHOR: sampler_call
    @torch.inference_mode()
    def __call__(self, logits: torch.Tensor, rows: Sequence[SamplingRow]) -> list[SampledToken]:
        """One token per row of `logits` [B, V] (rows[i] says what row i asks for), in row order.

        Contract, for every row:
        - logprobs (when params.logprobs is not None) are the model's own: log_softmax of the raw
          logits, before any penalty, mask or temperature (self._outputs reports them);
        - penalties (Task 5.2) apply to every row that asks for one, greedy rows included, over the
          row's prompt and output (token_histories);
        - while a row has fewer than params.min_tokens output tokens, none of its stop_token_ids
          (ids >= V ignored) can be chosen;
        - a row with `allowed` (structured output) can choose only an allowed token;
        - a greedy row (params.greedy) takes the argmax of what is left; any other row divides by
          its temperature, then filters (Task 5.3: its top_k, top_p, min_p) and draws (Task 5.4)
          from the softmax, a seeded row from its own generator;
        - the `logits` tensor passed in is left as it was (it may be the model's output).
        Every stage runs once for the whole batch, over the rows that need it.
        """
        logits = logits.float()
        batch, vocab = logits.shape
        device = logits.device
        params = [row.params for row in rows]
        column = lambda values, dtype=torch.float32: torch.tensor(values, dtype=dtype, device=device)  # noqa: E731
        want_logprobs = [p.logprobs for p in params]
        # Idea: each row's settings become a column; each stage runs once, on the rows that need it.
        # Stuck? `miniyaie hint 5.8` prints hints, one level at a time.
        # TODO(Task 5.8): One sampler for the whole batch. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 8: One sampler for the whole batch — see book/src/ch05_engine.md')

    @staticmethod
    def _outputs(tokens: torch.Tensor, raw_logprobs: torch.Tensor | None, want: list[int | None]) -> list[SampledToken]:
        """One SampledToken per row: the token, and when want[i] is not None its logprob under
        raw_logprobs and the want[i] likeliest tokens as (id, logprob), likeliest first ([] for 0).

        raw_logprobs is None when no row wants logprobs. Cost: the vocabulary is searched once
        for the whole batch, however many rows ask and whatever each asks, not once per row.
        """
        # Idea: rows ask for different numbers of alternatives: how can one search serve them all?
        # Stuck? `miniyaie hint 5.8` prints hints, one level at a time.
        # TODO(Task 5.8): One sampler for the whole batch. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 8: One sampler for the whole batch — see book/src/ch05_engine.md')
    # ANCHOR_END: sampler_call
