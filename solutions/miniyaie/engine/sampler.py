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
        # Nudge: each row's settings become a column; each stage runs once, on the rows that need it.
        # Hint 1: Order is the whole design. The user asked for the model's logprobs, so take
        #   them from the raw logits before anything edits them. Penalties, the min_tokens ban
        #   and the structured mask change what may be chosen, for greedy and sampled rows
        #   alike. Only then split: greedy rows are the argmax; temperature, filters and the
        #   draw touch the sampled rows alone. `logits.float()` may return the caller's own
        #   tensor, so every edit must make a new tensor (or clone first).
        # Hint 2: raw_logprobs = log_softmax of the logits if any row wants logprobs, else None.
        #   If any row has a penalty, build seen/counts with token_histories and call
        #   apply_penalties with one column per setting. Collect (row, stop id) pairs for the
        #   rows still under min_tokens and set those logits to -inf out of place. Mask the rows
        #   with `allowed`. tokens = argmax of every row. For the non-greedy rows: divide by
        #   their temperatures; if any of them filters, sample_top_columns (provided: your
        #   filter_logits, softmax and draw, on the columns that can survive) with their
        #   settings and generators, else softmax and draw; write those tokens over the
        #   argmax. _outputs builds the answer.
        # Hint 3:
        #   raw_logprobs = log_softmax(logits) if any(k is not None for k in want_logprobs) else None
        #   if any penalty: seen, counts = token_histories(prompts, outputs, vocab, device); logits = apply_penalties(...)
        #   banned = [(i, t) for rows under min_tokens for t in stop_token_ids if t < vocab]
        #   if banned: logits = logits.index_put((rows, ids), -inf)   # not index_put_
        #   masked = rows with allowed: logits = logits.clone(); logits[masked] = masked_fill(~allowed, -inf)
        #   tokens = logits.argmax(-1)
        #   sampled = [i for i, p in enumerate(params) if not p.greedy]
        #   scaled = logits[sampled] / temperatures[:, None]; generators = [rows[i].generator for i in sampled]
        #   tokens[sampled] = sample_top_columns(scaled, k, p, min_p, generators) if any row filters
        #                     else draw(softmax(scaled), generators)
        #   return self._outputs(tokens, raw_logprobs, want_logprobs)
        # BEGIN SOLUTION 5.8: One sampler for the whole batch
        raw_logprobs = torch.log_softmax(logits, dim=-1) if any(k is not None for k in want_logprobs) else None

        if any(p.repetition_penalty != 1 or p.presence_penalty or p.frequency_penalty for p in params):
            seen, counts = token_histories([row.prompt_token_ids for row in rows],
                                           [row.output_token_ids for row in rows], vocab, device)
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
            generators = [rows[i].generator for i in sampled]
            if any(p.top_k > 0 or p.top_p < 1 or p.min_p > 0 for p in chosen):
                tokens[rows_index] = sample_top_columns(
                    scaled, column([p.top_k for p in chosen], torch.int64),
                    column([p.top_p for p in chosen]), column([p.min_p for p in chosen]), generators,
                )
            else:
                tokens[rows_index] = draw(torch.softmax(scaled, dim=-1), generators)
        return self._outputs(tokens, raw_logprobs, want_logprobs)
        # END SOLUTION

    @staticmethod
    def _outputs(tokens: torch.Tensor, raw_logprobs: torch.Tensor | None, want: list[int | None]) -> list[SampledToken]:
        """One SampledToken per row: the token, and when want[i] is not None its logprob under
        raw_logprobs and the want[i] likeliest tokens as (id, logprob), likeliest first ([] for 0).

        raw_logprobs is None when no row wants logprobs. Cost: the vocabulary is searched once
        for the whole batch, however many rows ask and whatever each asks, not once per row.
        """
        # Nudge: rows ask for different numbers of alternatives: how can one search serve them all?
        # Hint 1: The chosen token's logprob is a lookup per row (gather); the alternatives are the
        #   row's best k, and rows ask for different k: compute the largest k once for the whole
        #   batch and let each row keep its first k. A row that asked for nothing gets the bare
        #   token (None logprob), and so does every row when raw_logprobs is None.
        # Hint 2: tokens.tolist(). If raw_logprobs is None: SampledToken(t) for each. Else chosen =
        #   raw_logprobs.gather(1, tokens[:, None]); k = max of the wanted ks (None as 0); topk
        #   of raw_logprobs when k > 0. Per row: SampledToken(t) if want is None, else
        #   SampledToken(t, chosen[i], the first want[i] (id, logprob) pairs).
        # Hint 3:
        #   if raw_logprobs is None: return [SampledToken(t) for t in tokens.tolist()]
        #   chosen = raw_logprobs.gather(1, tokens[:, None]).squeeze(1).tolist()
        #   top_values, top_ids = raw_logprobs.topk(max(k or 0 for k in want), dim=-1)  (if that is > 0)
        #   rows: SampledToken(t) / SampledToken(t, chosen[i], list(zip(top_ids[i, :k].tolist(), top_values[i, :k].tolist())))
        # BEGIN SOLUTION 5.8: One sampler for the whole batch
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
        # END SOLUTION
    # ANCHOR_END: sampler_call
