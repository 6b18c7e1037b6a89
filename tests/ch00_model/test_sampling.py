"""Task 0.5's sampling: greedy, temperature and top-p; SamplingParams' checks are provided (not graded)."""

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.model import SamplingParams, sample, top_p_filter

probabilities = st.lists(st.floats(0.001, 1.0), min_size=1, max_size=12).map(lambda xs: torch.tensor(xs) / sum(xs))


@pytest.mark.task("0.5")
@given(probs=probabilities, top_p=st.floats(0.01, 1.0))
@example(probs=torch.tensor([0.5, 0.3, 0.2]), top_p=0.5)  # the top token alone reaches p exactly
@example(probs=torch.tensor([0.4, 0.35, 0.25]), top_p=0.6)  # the second token crosses the threshold: kept
def test_top_p_keeps_the_smallest_set_reaching_p(probs, top_p):
    kept = top_p_filter(probs[None], top_p)[0]
    order = probs.argsort(descending=True, stable=True)
    mass_before = probs[order].cumsum(0) - probs[order]
    expected_kept = order[mass_before < top_p - 1e-6]
    allowed = order[mass_before < top_p + 1e-6]  # float rounding may keep a token sitting exactly on the edge
    got = set((kept > 0).nonzero().flatten().tolist())
    assert got >= set(expected_kept.tolist()), f"dropped a token the tokens above it do not reach top_p with: kept {sorted(got)}"
    assert got <= set(allowed.tolist()), f"kept a token whose higher-ranked tokens already reach top_p: kept {sorted(got)}"
    assert probs[kept > 0].sum() >= min(top_p, 1.0) - 1e-5, "the kept tokens reach top_p"
    torch.testing.assert_close(kept.sum(), torch.tensor(1.0), msg=lambda m: f"kept probabilities are renormalised: {m}")
    torch.testing.assert_close(kept[kept > 0], probs[kept > 0] / probs[kept > 0].sum(), msg=lambda m: f"in proportion: {m}")


@pytest.mark.task("0.5")
def test_top_p_examples_and_rows():
    kept = top_p_filter(torch.tensor([[0.4, 0.35, 0.25], [0.5, 0.25, 0.25], [0.25, 0.5, 0.25]]), 0.6)
    torch.testing.assert_close(kept[0], torch.tensor([0.4, 0.35, 0.0]) / 0.75, msg=lambda m: f"the crossing token stays: {m}")
    assert kept[1, 0] > 0 and (kept[1] > 0).sum() == 2, "[0.5, 0.25, 0.25] at 0.6: the top token and one of the tied ones"
    torch.testing.assert_close(kept[1].sort(descending=True).values, torch.tensor([2 / 3, 1 / 3, 0.0]))
    torch.testing.assert_close(kept[2], torch.tensor([0.25, 0.5, 0.0]) / 0.75, msg=lambda m: f"each row its own order: {m}")
    exact = top_p_filter(torch.tensor([[0.5, 0.25, 0.25]]), 0.5)[0]
    torch.testing.assert_close(exact, torch.tensor([1.0, 0.0, 0.0]), msg=lambda m: f"mass before reaching top_p exactly drops: {m}")
    torch.testing.assert_close(top_p_filter(torch.tensor([[0.2, 0.8]]), 1.0)[0], torch.tensor([0.2, 0.8]), msg=lambda m: f"top_p 1 keeps all: {m}")


@pytest.mark.task("0.5")
def test_greedy_is_argmax_and_seeded_sampling_repeats():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    assert torch.equal(sample(logits, SamplingParams(temperature=0)), logits.argmax(-1))
    params = SamplingParams(temperature=0.8, top_p=0.9)
    first = sample(logits, params, torch.Generator().manual_seed(7))
    assert torch.equal(first, sample(logits, params, torch.Generator().manual_seed(7)))


@pytest.mark.task("0.5")
@pytest.mark.parametrize("temperature, top_p", [(0.7, 1.0), (1.0, 0.8), (2.0, 0.95)])
def test_draws_follow_the_tempered_and_filtered_distribution(temperature, top_p):
    logits = torch.tensor([0.0, 1.0, 2.0, 3.0, -1.0])
    probs = torch.softmax(logits.double() / temperature, -1)
    order = probs.argsort(descending=True)
    keep = torch.zeros(5, dtype=torch.bool)
    keep[order[(probs[order].cumsum(0) - probs[order]) < top_p]] = True
    want = torch.where(keep, probs, 0) / probs[keep].sum()
    draws = sample(logits.expand(20000, 5), SamplingParams(temperature=temperature, top_p=top_p), torch.Generator().manual_seed(0))
    assert draws.shape == (20000,) and draws.dtype == torch.int64, "one int64 token id per row"
    freq = torch.bincount(draws, minlength=5).double() / 20000
    assert torch.allclose(freq, want, atol=0.015), f"draw frequencies {freq.tolist()} vs softmax(logits / T) filtered by top_p {want.tolist()}"


@pytest.mark.task("0.5")
def test_tiny_temperature_is_almost_greedy():
    logits = torch.tensor([[0.0, 1.0, 5.0, 2.0]])
    draws = [sample(logits, SamplingParams(temperature=0.05), torch.Generator().manual_seed(s)).item() for s in range(20)]
    assert draws == [2] * 20


@pytest.mark.ungraded
@pytest.mark.parametrize("kwargs", [dict(max_tokens=0), dict(temperature=-0.1), dict(top_p=0.0), dict(top_p=1.1)])
def test_invalid_sampling_params_are_rejected(kwargs):
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)
