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
    # Nudge: three penalties, every row at once: no Python loop over rows or tokens.
    # Hint 1: Each row has its own penalties, so a [B] vector must meet a [B, V] matrix. The
    #   repetition penalty touches only seen tokens and pushes a logit towards "less likely"
    #   whatever its sign (divide a positive one, multiply a negative one); an unseen token's
    #   logit is left exactly as it was. Presence and frequency look at the output counts only.
    # Hint 2: Broadcast each penalty as a column ([:, None]). Choose, elementwise, between the
    #   divided and the multiplied logit by the sign, and between that and the original by
    #   `seen`. Then subtract frequency times the counts and presence times (counts > 0), both
    #   converted to the logits' dtype.
    # Hint 3:
    #   rep = repetition[:, None]
    #   logits = where(seen, where(logits > 0, logits / rep, logits * rep), logits)
    #   counts = output_counts.to(logits.dtype)
    #   return logits - frequency[:, None] * counts - presence[:, None] * (counts > 0)
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
      probability reaches top_p; the token that crosses top_p is kept
      (top_p >= 1 rules nothing out, however small a token's probability).
    min_p [B]: drop tokens whose probability is below min_p times the most likely one's.
    The most likely token always survives; tokens tied with the last kept one are kept too.
    """
    # Nudge: each rule keeps a prefix of the row sorted by logit: find how long it is, sort once.
    # Hint 1: All three rules keep the most likely tokens and drop the rest, so each row's
    #   survivors are the first m tokens of its descending sort, and a token survives when its
    #   logit is at least that of the m-th (which also keeps ties). top_p is measured on what
    #   top_k kept, renormalised; min_p compares with the most likely token's probability.
    # Hint 2: Sort each row descending (a partial sort, topk, suffices when every row has a
    #   top_k). Mark ranks at or beyond k as dropped; softmax the sorted logits with those set to
    #   -inf; also drop a rank when the probability mass ranked above it already reaches top_p
    #   (only when top_p < 1), or when its probability is below min_p times the first one's.
    #   Count the survivors (at least 1), read the logit of the last survivor, and mask every
    #   logit below it.
    # Hint 3:
    #   k = where(top_k > 0, top_k, V).clamp(max=V); sorted = topk or sort, width = max(k)
    #   drop = arange(width)[None] >= k[:, None]
    #   probs = softmax(sorted.masked_fill(drop, -inf)); before = probs.cumsum(-1) - probs
    #   drop |= (before >= top_p[:, None]) & (top_p[:, None] < 1); drop |= probs < min_p[:, None] * probs[:, :1]
    #   last = sorted.gather(1, ((~drop).sum(-1).clamp(min=1) - 1)[:, None])
    #   return logits.masked_fill(logits < last, -inf)
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
    drop |= (mass_before >= top_p[:, None]) & (top_p[:, None] < 1)  # a float32 running sum reaches 1.0 early
    drop |= probs < min_p[:, None] * probs[:, :1]
    num_kept = (~drop).sum(dim=-1).clamp(min=1)
    last_kept = sorted_logits.gather(1, (num_kept - 1)[:, None])
    return logits.masked_fill(logits < last_kept, float("-inf"))
    # END SOLUTION
# ANCHOR_END: filter


# ANCHOR: draw
def draw(probs: torch.Tensor, generators: Sequence[torch.Generator | None]) -> torch.Tensor:
    """One token per row of probs [B, V] (rows need not sum to 1); a row with a generator draws only from it.

    Token i of a row is drawn with probability probs[i] / row total; a token
    with probability 0 is never drawn. A seeded row's draw depends only on its
    own generator: the same seed gives the same token whatever else is in the batch.
    """
    # Nudge: one uniform number per row, placed on the row's cumulative distribution.
    # Hint 1: Inverse-CDF sampling: lay the row's probabilities end to end on [0, total) and
    #   see which piece a uniform point lands in. The point must be scaled by the row's total
    #   (rows are not normalised), must never reach the total, and a seeded row must take its
    #   number from its own generator and nobody else's, or batching changes its answer.
    # Hint 2: Make one uniform number per row: one draw from each seeded row's generator, one
    #   batched draw for all unseeded rows. Compute each row's cumulative sum in float64, scale
    #   u by the row total and clamp it just below the total (nextafter). The token is the
    #   first index whose cumulative sum is strictly above the target (searchsorted, right).
    # Hint 3:
    #   u = empty(B, float64); for each seeded row r: u[r] = rand(1, generator=g_r)
    #   u[unseeded rows] = rand(len(unseeded))
    #   cdf = probs.double().cumsum(-1); total = cdf[:, -1]
    #   target = minimum(u * total, nextafter(total, 0))
    #   return searchsorted(cdf, target[:, None], right=True).squeeze(1)
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
        # Nudge: each row's settings become a column; each stage runs once, on the rows that need it.
        # Hint 1: Order is the whole design. The user asked for the model's logprobs, so take
        #   them from the raw logits before anything edits them. Penalties, the min_tokens ban
        #   and the structured mask change what may be chosen, for greedy and sampled rows
        #   alike. Only then split: greedy rows are the argmax; temperature, filters and the
        #   draw touch the sampled rows alone. `logits.float()` may return the caller's own
        #   tensor, so every edit must make a new tensor (or clone first).
        # Hint 2: raw_logprobs = log_softmax of the logits if any row wants logprobs, else None.
        #   If any row has a penalty, build seen/counts with self._histories and call
        #   apply_penalties with one column per setting. Collect (row, stop id) pairs for the
        #   rows still under min_tokens and set those logits to -inf out of place. Mask the rows
        #   with `allowed`. tokens = argmax of every row. For the non-greedy rows: divide by
        #   their temperatures, filter_logits if any of them filters, softmax, and draw with
        #   their generators; write those tokens over the argmax.
        # Hint 3:
        #   raw_logprobs = log_softmax(logits) if any(k is not None for k in want_logprobs) else None
        #   if any penalty: seen, counts = self._histories(rows, vocab, device); logits = apply_penalties(...)
        #   banned = [(i, t) for rows under min_tokens for t in stop_token_ids if t < vocab]
        #   if banned: logits = logits.index_put((rows, ids), -inf)   # not index_put_
        #   masked = rows with allowed: logits = logits.clone(); logits[masked] = masked_fill(~allowed, -inf)
        #   tokens = logits.argmax(-1)
        #   sampled = [i for i, p in enumerate(params) if not p.greedy]
        #   scaled = logits[sampled] / temperatures[:, None]; maybe filter_logits(scaled, k, p, min_p)
        #   tokens[sampled] = draw(softmax(scaled), [rows[i].generator for i in sampled])
        # BEGIN SOLUTION 5.6: One sampler for the whole batch
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
        masked = [i for i, row in enumerate(rows) if row.allowed is not None]
        if masked:  # structured output: only the tokens that keep the output matchable (chapter 8)
            allowed = torch.stack([rows[i].allowed[:vocab].to(device) for i in masked])
            logits = logits.clone()
            logits[masked] = logits[masked].masked_fill(~allowed, float("-inf"))

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
        # END SOLUTION
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
