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
    # Hint: torch.where(seen, penalised, logits) applies the repetition
    # penalty only where seen; broadcast the [B] penalties with [:, None].
    # BEGIN SOLUTION 5.1: Penalties
    rep = repetition[:, None]
    logits = torch.where(seen, torch.where(logits > 0, logits / rep, logits * rep), logits)
    counts = output_counts.to(logits.dtype)
    return logits - frequency[:, None] * counts - presence[:, None] * (counts > 0).to(logits.dtype)
    # END SOLUTION
# ANCHOR_END: penalties


# ANCHOR: filter
def filter_logits(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Set to -inf every token a row's top_k, top_p or min_p rules out (logits already / temperature).

    top_k [B] (long): keep the k most likely tokens (k <= 0: keep all).
    top_p [B]: of what top_k kept, keep the most likely tokens until their
      probability reaches top_p; the token that crosses top_p is kept.
    min_p [B]: drop tokens whose probability is below min_p times the most likely one's.
    The most likely token always survives; tokens tied with the last kept one are kept too.
    """
    # Hint: every rule keeps a prefix of the row sorted by descending logit,
    # so find each row's number of kept tokens and compare against the logit
    # of the last one. Sort once (descending; `topk` is enough when every
    # row has a top_k); mask ranks >= k; softmax the masked sorted logits; a
    # token goes when the mass ranked above it already reaches top_p, or
    # when its probability < min_p * the top probability.
    # BEGIN SOLUTION 5.2: top-k, top-p and min-p in one sort
    vocab = logits.shape[-1]
    k = torch.where(top_k > 0, top_k, vocab).clamp(max=vocab)
    width = int(k.max())
    if width < vocab:  # every row has a top_k: a partial sort is enough
        sorted_logits = logits.topk(width, dim=-1).values
    else:
        sorted_logits = logits.sort(dim=-1, descending=True).values
    drop = torch.arange(width, device=logits.device)[None, :] >= k[:, None]
    probs = torch.softmax(sorted_logits.masked_fill(drop, float("-inf")), dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs
    drop |= mass_before >= top_p[:, None]
    drop |= probs < min_p[:, None] * probs[:, :1]
    num_kept = (~drop).sum(dim=-1).clamp(min=1)
    last_kept = sorted_logits.gather(1, (num_kept - 1)[:, None])
    return logits.masked_fill(logits < last_kept, float("-inf"))
    # END SOLUTION
# ANCHOR_END: filter


# ANCHOR: draw
def draw(probs: torch.Tensor, generators: Sequence[torch.Generator | None]) -> torch.Tensor:
    """One token per row of probs [B, V] (rows need not sum to 1); a row with a generator draws only from it."""
    # Hint: inverse-CDF sampling with one uniform number u per row: torch.rand
    # from each seeded row's own generator, one call for the other rows. The
    # token is the first index whose cumulative probability exceeds u * the
    # row's total (torch.searchsorted(..., right=True)); keep the target
    # strictly below the total (torch.nextafter) so that it always exists.
    # BEGIN SOLUTION 5.3: One draw per row, seeded rows on their own generator
    u = torch.empty(len(generators), dtype=torch.float64, device=probs.device)
    unseeded = [row for row, generator in enumerate(generators) if generator is None]
    for row, generator in enumerate(generators):
        if generator is not None:
            u[row] = torch.rand(1, generator=generator, dtype=torch.float64, device=probs.device)[0]
    if unseeded:
        u[unseeded] = torch.rand(len(unseeded), dtype=torch.float64, device=probs.device)
    cdf = probs.double().cumsum(dim=-1)
    total = cdf[:, -1]
    target = torch.minimum(u * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, target[:, None], right=True).squeeze(1)
    # END SOLUTION
# ANCHOR_END: draw


class Sampler:
    """Turns a step's logits [B, V] and one SamplingRow per row into one SampledToken per row."""

    @torch.inference_mode()
    def __call__(self, logits: torch.Tensor, rows: Sequence[SamplingRow]) -> list[SampledToken]:
        logits = logits.float()
        batch, vocab = logits.shape
        device = logits.device
        params = [row.params for row in rows]
        column = lambda values, dtype=torch.float32: torch.tensor(values, dtype=dtype, device=device)  # noqa: E731

        want_logprobs = [p.logprobs for p in params]
        raw_logprobs = torch.log_softmax(logits, dim=-1) if any(k is not None for k in want_logprobs) else None

        if any(p.repetition_penalty != 1 or p.presence_penalty or p.frequency_penalty for p in params):
            seen, counts = self._histories(rows, vocab, device)
            logits = apply_penalties(
                logits, seen, counts,
                column([p.repetition_penalty for p in params]),
                column([p.presence_penalty for p in params]),
                column([p.frequency_penalty for p in params]),
            )
        banned = [(i, t) for i, row in enumerate(rows) if len(row.output_token_ids) < row.params.min_tokens
                  for t in row.stop_token_ids if t < vocab]
        if banned:
            index = column(banned, torch.int64)
            logits = logits.index_put((index[:, 0], index[:, 1]), column([float("-inf")]))  # a copy: never edit the model's output

        tokens = logits.argmax(dim=-1)
        sampled = [i for i, p in enumerate(params) if not p.greedy]
        if sampled:
            rows_index = column(sampled, torch.int64)
            chosen = [params[i] for i in sampled]
            scaled = logits[rows_index] / column([p.temperature for p in chosen])[:, None]
            if any(p.top_k > 0 or p.top_p < 1 or p.min_p > 0 for p in chosen):
                scaled = filter_logits(
                    scaled, column([p.top_k for p in chosen], torch.int64),
                    column([p.top_p for p in chosen]), column([p.min_p for p in chosen]),
                )
            probs = torch.softmax(scaled, dim=-1)
            tokens[rows_index] = draw(probs, [rows[i].generator for i in sampled])

        return self._outputs(tokens, raw_logprobs, want_logprobs)

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
