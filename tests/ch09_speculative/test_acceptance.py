"""Task 9.2: the acceptance rule. Greedy against its definition; sampled by its guarantees, then by
chi-square tests that the kept tokens have the target's distribution (fixed generator seeds)."""

import math

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.speculative import accept_greedy, accept_sampled



@pytest.mark.task("9.2")
@given(draft=st.lists(st.integers(0, 2), max_size=6), target=st.lists(st.integers(0, 2), min_size=7, max_size=7))
@example(draft=[], target=[3, 0, 0, 0, 0, 0, 0])  # no drafts: the target's token alone
@example(draft=[4, 7, 9], target=[4, 7, 9, 5, 0, 0, 0])  # all accepted, and the bonus token
@example(draft=[4, 7, 9], target=[1, 7, 9, 5, 0, 0, 0])  # the first rejected
@example(draft=[4, 7, 9], target=[4, 7, 2, 5, 0, 0, 0])  # the last rejected
def test_accept_greedy_keeps_the_agreeing_drafts_then_the_targets_token(draft, target):
    target = target[: len(draft) + 1]
    n = next((i for i, (d, t) in enumerate(zip(draft, target)) if d != t), len(draft))
    want = draft[:n] + [target[n]]
    got = accept_greedy(draft, target)
    assert got == want, (
        f"accept_greedy({draft}, {target}) = {got}, expected {want}: the {n} drafts that equal the target's "
        f"tokens, then the target's token at position {n}" + (" (the bonus token)" if n == len(draft) else ""))


@pytest.mark.task("9.2")
def test_accept_greedy_rejects_a_target_of_the_wrong_length():
    for draft, target in [([1, 2], [1, 2]), ([1], [1, 2, 3]), ([], [])]:
        with pytest.raises(ValueError):
            accept_greedy(draft, target)
            pytest.fail(f"accept_greedy({draft}, {target}) returned: target needs len(draft) + 1 tokens")


def rows(weights: list[list[int]]) -> torch.Tensor:
    t = torch.tensor(weights, dtype=torch.float32)
    return t / t.sum(dim=1, keepdim=True)


weights_row = st.lists(st.integers(0, 3), min_size=4, max_size=4).filter(any)


@pytest.mark.task("9.2")
@given(data=st.data(), k=st.integers(0, 4), point_mass=st.booleans(), seed=st.integers(0, 2**16))
def test_accept_sampled_keeps_a_prefix_and_never_a_token_the_target_excludes(data, k, point_mass, seed):
    p = rows(data.draw(st.lists(weights_row, min_size=k + 1, max_size=k + 1), label="target weights"))
    q = None if point_mass else rows(data.draw(st.lists(weights_row, min_size=k, max_size=k), label="draft weights")) if k else torch.empty(0, 4)
    draft = data.draw(st.lists(st.integers(0, 3), min_size=k, max_size=k), label="draft")
    got = accept_sampled(draft, p, q, torch.Generator().manual_seed(seed))
    where = f"accept_sampled({draft}, target {p.tolist()}, draft {None if q is None else q.tolist()})"
    assert 1 <= len(got) <= k + 1, f"{where} = {got}: 1 to k + 1 = {k + 1} tokens expected"
    kept = len(got) - 1
    assert got[:kept] == draft[:kept], f"{where} = {got}: all but the last token must be the drafts, in order"
    for i, t in enumerate(got):
        assert p[i, t] > 0, f"{where} = {got}: token {t} at position {i} has target probability 0"
    if kept < k:
        assert got[-1] != draft[kept], (
            f"{where} = {got}: draft {draft[kept]} at position {kept} was rejected, yet returned as the next "
            f"token: after a rejection the token must come from what the kept drafts do not already cover")
    again = accept_sampled(draft, p, q, torch.Generator().manual_seed(seed))
    assert again == got, f"{where}: {got} and then {again} with the same seed"


@pytest.mark.task("9.2")
@given(argmax=st.lists(st.integers(0, 4), min_size=1, max_size=5), data=st.data(), point_mass=st.booleans())
@example(argmax=[2, 1, 4], data=None, point_mass=True)
def test_accept_sampled_with_one_hot_targets_is_accept_greedy(argmax, data, point_mass):
    k = len(argmax) - 1
    p = torch.nn.functional.one_hot(torch.tensor(argmax), 5).float()
    if data is None:  # the explicit example: every draft right
        draft, q = argmax[:k], None
    else:
        draft = data.draw(st.lists(st.sampled_from([0, 1, 2, 3, 4] + argmax), min_size=k, max_size=k), label="draft")
        q = None if point_mass else rows(data.draw(st.lists(st.lists(st.integers(1, 3), min_size=5, max_size=5),
                                                            min_size=k, max_size=k), label="draft weights")) if k else torch.empty(0, 5)
    got = accept_sampled(draft, p, q, torch.Generator().manual_seed(0))
    want = accept_greedy(draft, argmax)
    assert got == want, f"one-hot targets {argmax}, draft {draft}: accept_sampled gave {got}, accept_greedy {want}"


@pytest.mark.task("9.2")
def test_accept_sampled_rejects_shapes_that_do_not_fit():
    p = rows([[1, 1, 1]] * 3)
    cases = [
        ([0, 1], rows([[1, 1, 1]] * 2), None, "target_probs with k rows instead of k + 1"),
        ([0, 1], p[0], None, "a 1-d target_probs"),
        ([0, 1], p, rows([[1, 1, 1]] * 3), "draft_probs with k + 1 rows"),
        ([0, 1], p, rows([[1, 1]] * 2), "draft_probs with another vocabulary"),
        ([0, 3], p, None, "a draft token outside the vocabulary"),
    ]
    for draft, target, q, what in cases:
        with pytest.raises(ValueError):
            accept_sampled(draft, target, q, torch.Generator().manual_seed(0))
            pytest.fail(f"accept_sampled accepted {what}: a ValueError expected")


# --- the distribution: chi-square tests with fixed seeds -------------------------------------------------

Z = 4.753  # the standard normal's 1 - 1e-6 quantile: a correct rule fails one of these tests about once in 10^6 seeds


def chi_square_limit(df: int) -> float:
    """The chi-square distribution's 1 - 1e-6 quantile (Wilson-Hilferty's approximation; no scipy)."""
    h = 2 / (9 * df)
    return df * (1 - h + Z * math.sqrt(h)) ** 3


def assert_distributed_as(counts: torch.Tensor, p: torch.Tensor, what: str) -> None:
    n, support = int(counts.sum()), p > 0
    assert n >= 200, f"{what}: only {n} samples, too few to test"
    assert counts[~support].sum() == 0, (
        f"{what}: returned tokens {torch.nonzero(~support & (counts > 0)).flatten().tolist()} that have target probability 0")
    expected = n * p[support].double()
    stat = float(((counts[support].double() - expected) ** 2 / expected).sum())
    df = int(support.sum()) - 1
    limit = chi_square_limit(df)
    assert stat <= limit, (
        f"{what}: frequencies {[round(c / n, 3) for c in counts.tolist()]} over {n} samples, target "
        f"{[round(x, 3) for x in p.tolist()]}: chi-square {stat:.1f} > {limit:.1f} ({df} degrees of freedom)")


TRIALS = 4000
P0 = [0.05, 0.30, 0.10, 0.25, 0.20, 0.10]
P1 = [0.40, 0.05, 0.05, 0.20, 0.10, 0.20]
P2 = [0.10, 0.10, 0.30, 0.10, 0.30, 0.10]
ZEROS = [[0.0, 0.45, 0.0, 0.35, 0.20, 0.0], [0.5, 0.0, 0.0, 0.0, 0.25, 0.25], [0.0, 0.0, 0.6, 0.4, 0.0, 0.0]]
CASES = {  # name: (target rows, draft rows or None, fixed drafts for the point mass)
    "draft far from target": ([P0, P1, P2], [[0.40, 0.02, 0.40, 0.02, 0.06, 0.10], [0.02, 0.50, 0.30, 0.02, 0.06, 0.10]], None),
    "draft close to target": ([P0, P1, P2], [[0.08, 0.27, 0.12, 0.22, 0.21, 0.10], [0.35, 0.08, 0.05, 0.22, 0.10, 0.20]], None),
    "point-mass draft": ([P0, P1, P2], None, [3, 0]),
    "target with zeros": (ZEROS, [[0.2, 0.2, 0.2, 0.2, 0.1, 0.1], [0.1, 0.3, 0.1, 0.1, 0.2, 0.2]], None),
    "point mass on an excluded token": (ZEROS, None, [2, 4]),
}


def run_trials(target, draft_rows, fixed, seed=0):
    """TRIALS runs of the rule with drafts drawn from draft_rows (or the fixed drafts): the returned lists."""
    g = torch.Generator().manual_seed(seed)
    p = torch.tensor(target, dtype=torch.float64)
    q = None if draft_rows is None else torch.tensor(draft_rows, dtype=torch.float64)
    drafts = [fixed] * TRIALS if q is None else torch.multinomial(q, TRIALS, replacement=True, generator=g).T.tolist()
    return p, [accept_sampled(d, p, q, g) for d in drafts]


@pytest.mark.task("9.2")
@pytest.mark.parametrize("case", list(CASES))
def test_accept_sampled_outputs_the_targets_distribution(case):
    """The first token is distributed as row 0 whatever the drafts; given that draft 0 was kept, the second
    as row 1 (row 1 was computed after draft 0)."""
    target, draft_rows, fixed = CASES[case]
    p, outs = run_trials(target, draft_rows, fixed)
    vocab = p.shape[1]
    first = torch.bincount(torch.tensor([o[0] for o in outs]), minlength=vocab)
    assert_distributed_as(first, p[0], f"{case}, the first token")
    second = torch.bincount(torch.tensor([o[1] for o in outs if len(o) >= 2] or [0]), minlength=vocab)
    if second.sum() >= 200:
        assert_distributed_as(second, p[1], f"{case}, the second token when draft 0 was kept")


@pytest.mark.task("9.2")
def test_accept_sampled_adds_a_bonus_token_from_the_last_row_when_every_draft_is_kept():
    """Drafts drawn from the target itself are always kept: k + 1 tokens, the last one a sample of row k."""
    p, outs = run_trials([P0, P1, P2], [P0, P1], None, seed=1)
    short = [o for o in outs if len(o) != 3]
    assert not short, (
        f"{len(short)} of {len(outs)} results have fewer than 3 tokens (e.g. {short[0]}), though every draft "
        f"came from the target's own rows and must be kept, followed by a bonus token from row 2")
    bonus = torch.bincount(torch.tensor([o[2] for o in outs]), minlength=p.shape[1])
    assert_distributed_as(bonus, p[2], "the bonus token")
