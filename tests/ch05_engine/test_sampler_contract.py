"""The sampler's contracts that random inputs rarely reach: top-p after top-k, unnormalised rows, one generator per seed."""

import math

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.engine.sampling_stages import draw, filter_logits

NEG_INF = float("-inf")


def kept(logits: torch.Tensor, k: int, p: float, min_p: float = 0.0) -> list[bool]:
    got = filter_logits(logits, torch.tensor([k]), torch.tensor([p]), torch.tensor([min_p]))
    return (got[0] > NEG_INF).tolist()


# ---------------------------------------------------------------- 5.3
@pytest.mark.task("5.3")
@pytest.mark.parametrize("other_k", [None, 0, 3])
def test_top_p_counts_mass_among_the_tokens_top_k_kept(other_k):
    """k=2 keeps 0.5 and 0.3, renormalised to 0.625 and 0.375: token 0 alone reaches p=0.6.

    other_k: a second row in the batch (none, no top-k, a wider top-k), so
    that the row is not always the one that sets how much is sorted.
    """
    row = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    ks, ps = [2], [0.6]
    if other_k is not None:
        ks, ps = ks + [other_k], ps + [1.0]
    got = filter_logits(row.repeat(len(ks), 1), torch.tensor(ks), torch.tensor(ps), torch.zeros(len(ks)))
    assert (got[0] > NEG_INF).tolist() == [True, False, False, False], (
        "top-p must use the probabilities renormalised over what top-k kept (0.625, 0.375), "
        "not the full softmax (0.5 < 0.6 would keep token 1 too)"
    )
    assert kept(row[None], 0, 0.6) == [True, True, False, False], "without top-k, 0.5 < 0.6: the crossing token 1 is kept"


@pytest.mark.task("5.3")
def test_min_p_is_relative_to_the_top_kept_probability():
    logits = torch.log(torch.tensor([[0.4, 0.3, 0.2, 0.1]]))
    assert kept(logits, 0, 1.0, min_p=0.45) == [True, True, True, False], "0.2 >= 0.45 * 0.4 stays, 0.1 goes"
    assert kept(logits, 0, 1.0, min_p=0.76) == [True, False, False, False], "0.3 < 0.76 * 0.4"
    assert kept(logits, 1, 1.0) == [True, False, False, False], "top-k 1 keeps only the most likely token"
    assert kept(logits, 4, 1.0) == [True, True, True, True] and kept(logits, 5, 1.0) == [True] * 4, "k >= vocab keeps all"


@pytest.mark.task("5.3")
def test_a_token_whose_higher_ranked_mass_reaches_top_p_exactly_goes():
    """Probabilities 0.5, 0.25, 0.125, 0.125 (exact in float32): top-p 0.75 is reached by the first two."""
    logits = torch.tensor([[0.0, -1.0, -2.0, -2.0]]) * math.log(2)
    probs = torch.softmax(logits, dim=-1)[0].tolist()
    if probs != [0.5, 0.25, 0.125, 0.125]:
        pytest.skip(f"this torch's softmax is not exact here ({probs}): the boundary cannot be hit")
    assert kept(logits, 0, 0.75) == [True, True, False, False], (
        "the mass ranked above token 2 is exactly 0.75 = top_p: it already reaches top_p, so token 2 goes "
        "(drop when mass before >= top_p, not >)"
    )
    assert kept(logits, 0, 0.5) == [True, False, False, False]
    assert kept(logits, 0, 1.0, min_p=0.25) == [True, True, True, True], (
        "0.125 is exactly min_p * 0.5: not below it, so it stays (drop only p < min_p * top)"
    )


@pytest.mark.task("5.3")
def test_the_most_likely_token_always_survives():
    logits = torch.tensor([[0.5, 2.0, -1.0, 1.0]])
    assert kept(logits, 0, 0.0) == [False, True, False, False], "top_p = 0 still keeps the most likely token"
    assert kept(logits, 1, 0.0, min_p=1.0) == [False, True, False, False]


@pytest.mark.task("5.3")
def test_tokens_tied_with_the_last_kept_one_are_kept():
    logits = torch.tensor([[2.0, 1.0, 1.0, 0.0]])
    assert kept(logits, 2, 1.0) == [True, True, True, False], "a tie at the k-th place keeps every tied token"


# ---------------------------------------------------------------- 5.4
@pytest.mark.task("5.4")
@pytest.mark.parametrize("seeded", [False, True])
def test_a_uniform_number_of_zero_never_draws_a_token_of_probability_zero(monkeypatch, seeded):
    """u = 0 is a possible uniform draw, and it sits on the boundary in front of the first token that has mass."""
    real_rand = torch.rand

    def zeros(*size, generator=None, dtype=None, device=None, **kwargs):  # every uniform number is 0
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)) else size
        return torch.zeros(shape, dtype=dtype or torch.float32, device=device)

    monkeypatch.setattr(torch, "rand", zeros)
    probs = torch.tensor([[0.0, 0.0, 0.7, 0.3]])
    generator = torch.Generator().manual_seed(1) if seeded else None
    token = draw(probs, [generator]).item()
    monkeypatch.setattr(torch, "rand", real_rand)
    assert token == 2, (
        f"with u = 0 the draw picked token {token}, whose probability is {probs[0, token].item()}: the point u * total "
        "belongs to the first token whose running sum is above it, not to one whose running sum equals it")


@pytest.mark.task("5.4")
@pytest.mark.parametrize("total", [0.1, 4.0])
def test_a_row_that_does_not_sum_to_one_is_drawn_in_proportion(total):
    """The draw compares u * the row's total with the running sum: rows may be unnormalised weights."""
    shape = torch.tensor([0.2, 0.2, 0.6])
    probs = (shape * total)[None, :].repeat(3000, 1)
    torch.manual_seed(0)
    freq = torch.bincount(draw(probs, [None] * 3000), minlength=3).float() / 3000
    assert torch.allclose(freq, shape, atol=0.04), (
        f"rows summing to {total} drew {freq.tolist()} instead of {shape.tolist()}: "
        "compare the cumulative sum with u * the row's total, not with u alone"
    )


@pytest.mark.task("5.4")
@given(seeds=st.lists(st.integers(0, 2**31), min_size=2, max_size=4, unique=True), unseeded_first=st.booleans())
@example(seeds=[1, 2], unseeded_first=False)
def test_each_seeded_row_draws_from_its_own_seed(seeds, unseeded_first):
    """Two seeded rows in one batch draw what each seed draws alone (one generator per row, never shared)."""
    probs = torch.full((1, 1000), 1e-3)
    alone = []
    for seed in seeds:
        generator = torch.Generator().manual_seed(seed)
        alone.append([draw(probs, [generator]).item() for _ in range(3)])
    generators = [torch.Generator().manual_seed(seed) for seed in seeds]
    rows = ([None] if unseeded_first else []) + generators
    batch = probs.repeat(len(rows), 1)
    together = [draw(batch, rows).tolist()[-len(seeds):] for _ in range(3)]
    together = [list(column) for column in zip(*together)]
    assert together == alone, "each seeded row must draw from its own generator, as it would alone"


@pytest.mark.task("5.3")
def test_top_p_of_one_rules_nothing_out_however_small_a_probability():
    logits = torch.tensor([[0.0, -30.0, -60.0]])  # in float32 the running sum reaches 1.0 at the first token
    assert kept(logits, 0, 1.0) == [True, True, True], "top_p = 1 keeps every token, even one of probability 1e-13"
