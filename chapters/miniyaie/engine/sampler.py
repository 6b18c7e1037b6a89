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


# ANCHOR: penalties
def apply_penalties(
    logits: torch.Tensor,
    seen: torch.Tensor,
    output_counts: torch.Tensor,
    repetition: torch.Tensor,
    presence: torch.Tensor,
    frequency: torch.Tensor,
) -> torch.Tensor:
    """Penalised logits [B, V].

    seen [B, V] bool: the token occurs in the prompt or the output.
    output_counts [B, V]: how often the token occurs in the output.
    repetition, presence, frequency [B]: each row's penalties.

    repetition (as in CTRL and transformers): a seen token's logit is divided
    by the penalty when positive and multiplied by it when negative.
    presence / frequency (as in OpenAI): logit -= presence * (count > 0) + frequency * count.
    """
    # Idea: three penalties, every row at once: no Python loop over rows or tokens.
    # Stuck? `miniyaie hint 5.1` prints hints, one level at a time.
    # TODO(Task 5.1): Penalties. Replace this line with your code.
    raise NotImplementedError('Chapter 5, Task 1: Penalties — see book/src/ch05_engine.md')
# ANCHOR_END: penalties


# ANCHOR: filter
def filter_logits(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Set to -inf every token a row's top_k, top_p or min_p rules out (logits already / temperature).

    top_k [B] (long): keep the k most likely tokens (k <= 0: keep all).
    top_p [B]: of what top_k kept, keep the most likely tokens until their
      probability reaches top_p; the token that crosses top_p is kept
      (top_p >= 1 rules nothing out, however small a token's probability).
    min_p [B]: drop tokens whose probability is below min_p times the most likely one's.
    The most likely token always survives; tokens tied with the last kept one are kept too.
    """
    # Idea: each rule keeps a prefix of the row sorted by logit: find how long it is, sort once.
    # Stuck? `miniyaie hint 5.2` prints hints, one level at a time.
    # TODO(Task 5.2): top-k, top-p and min-p in one sort. Replace this line with your code.
    raise NotImplementedError('Chapter 5, Task 2: top-k, top-p and min-p in one sort — see book/src/ch05_engine.md')
# ANCHOR_END: filter


# ANCHOR: draw
def draw(probs: torch.Tensor, generators: Sequence[torch.Generator | None]) -> torch.Tensor:
    """One token per row of probs [B, V] (rows need not sum to 1); a row with a generator draws only from it.

    Token i of a row is drawn with probability probs[i] / row total; a token
    with probability 0 is never drawn. A seeded row's draw depends only on its
    own generator: the same seed gives the same token whatever else is in the batch.
    """
    # Idea: one uniform number per row, placed on the row's cumulative distribution.
    # Stuck? `miniyaie hint 5.3` prints hints, one level at a time.
    # TODO(Task 5.3): One draw per row, seeded rows on their own generator. Replace this line with your code.
    raise NotImplementedError('Chapter 5, Task 3: One draw per row, seeded rows on their own generator — see book/src/ch05_engine.md')
# ANCHOR_END: draw


class Sampler:
    """Turns a step's logits [B, V] and one SamplingRow per row into one SampledToken per row."""

    # ANCHOR: sampler_call
    @torch.inference_mode()
    def __call__(self, logits: torch.Tensor, rows: Sequence[SamplingRow]) -> list[SampledToken]:
        """One token per row of `logits` [B, V] (rows[i] says what row i asks for), in row order.

        Contract, for every row:
        - logprobs (when params.logprobs is not None) are the model's own: log_softmax of the raw
          logits, before any penalty, mask or temperature (self._outputs reports them);
        - penalties (Task 5.1) apply to every row that asks for one, greedy rows included, over the
          row's prompt and output (self._histories);
        - while a row has fewer than params.min_tokens output tokens, none of its stop_token_ids
          (ids >= V ignored) can be chosen;
        - a row with `allowed` (structured output) can choose only an allowed token;
        - a greedy row (params.greedy) takes the argmax of what is left; any other row divides by
          its temperature, then filters (Task 5.2: its top_k, top_p, min_p) and draws (Task 5.3)
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
        # Stuck? `miniyaie hint 5.6` prints hints, one level at a time.
        # TODO(Task 5.6): One sampler for the whole batch. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 6: One sampler for the whole batch — see book/src/ch05_engine.md')
        return self._outputs(tokens, raw_logprobs, want_logprobs)
    # ANCHOR_END: sampler_call

    @staticmethod
    def _histories(rows: Sequence[SamplingRow], vocab: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """seen [B, V] (prompt or output) and output counts [B, V], built with two scatters."""
        def padded(lists):
            width = max(1, max(len(x) for x in lists))
            ids = torch.full((len(lists), width), vocab, dtype=torch.int64, device=device)  # vocab = padding column
            for i, x in enumerate(lists):
                if x:
                    ids[i, : len(x)] = torch.as_tensor(list(x), dtype=torch.int64, device=device)
            return ids

        outputs = padded([row.output_token_ids for row in rows])
        counts = torch.zeros(len(rows), vocab + 1, device=device).scatter_add_(1, outputs, torch.ones_like(outputs, dtype=torch.float32))
        seen = torch.zeros(len(rows), vocab + 1, dtype=torch.bool, device=device)
        seen.scatter_(1, padded([row.prompt_token_ids for row in rows]), True)
        return seen[:, :vocab] | (counts[:, :vocab] > 0), counts[:, :vocab]

    @staticmethod
    def _outputs(tokens: torch.Tensor, raw_logprobs: torch.Tensor | None, want: list[int | None]) -> list[SampledToken]:
        token_list = tokens.tolist()
        if raw_logprobs is None:
            return [SampledToken(t) for t in token_list]
        chosen = raw_logprobs.gather(1, tokens[:, None]).squeeze(1).tolist()
        top_k = max(k or 0 for k in want)
        top_values, top_ids = raw_logprobs.topk(top_k, dim=-1) if top_k else (None, None)
        out = []
        for i, (token, k) in enumerate(zip(token_list, want)):
            if k is None:
                out.append(SampledToken(token))
                continue
            alternatives = list(zip(top_ids[i, :k].tolist(), top_values[i, :k].tolist())) if k else []
            out.append(SampledToken(token, chosen[i], alternatives))
        return out
