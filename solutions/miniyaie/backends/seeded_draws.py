"""Seeded rows of one request at several output positions in one step (speculative decoding's verify step).

A seeded request must draw the same random numbers for the same output positions whatever the step's shape:
the token at output position p takes the p-th number of its generator, drafts or not. How many positions a
request verifies in a step depends on the other requests (they share the step's draft budget), so one
number per scored row would make its tokens depend on the batch. Its rows are therefore sampled in position
order, one position per sampler call (at most k + 1 calls, and only while such a request drafted), and the
caller rewinds its generator to the state after its last emitted token: the numbers behind rejected drafts
are drawn again at the next step.
"""

from __future__ import annotations

import torch


def sample_in_position_order(sampler, logits: torch.Tensor, rows: list, owners: list[str], offsets: list[int]):
    """(one token per row, {request id: its generator's state after each of its rows}) for the seeded requests
    with more than one row; rows[i] is a SamplingRow of request owners[i] at position offsets[i] of the step."""
    drafted = {rid for rid, j in zip(owners, offsets) if j > 0}
    if not any(row.generator is not None and rid in drafted for row, rid in zip(rows, owners)):
        return sampler(logits, rows), {}
    tokens: list = [None] * len(rows)
    states: dict[str, list[torch.Tensor]] = {}
    for j in range(max(offsets) + 1):
        wave = [i for i, offset in enumerate(offsets) if offset == j]
        for i, token in zip(wave, sampler(logits[wave], [rows[i] for i in wave])):
            tokens[i] = token
            if rows[i].generator is not None and owners[i] in drafted:
                states.setdefault(owners[i], []).append(rows[i].generator.get_state())
    return tokens, states
