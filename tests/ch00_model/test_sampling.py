"""Sampling: greedy, temperature and top-p (provided code, not graded)."""

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.model import SamplingParams, sample, top_p_filter

pytestmark = pytest.mark.ungraded

probabilities = st.lists(st.floats(0.001, 1.0), min_size=1, max_size=12).map(lambda xs: torch.tensor(xs) / sum(xs))


@given(probs=probabilities, top_p=st.floats(0.01, 1.0))
@example(probs=torch.tensor([0.5, 0.3, 0.2]), top_p=0.5)  # the top token alone reaches p exactly
@example(probs=torch.tensor([0.4, 0.35, 0.25]), top_p=0.6)  # the second token crosses the threshold: kept
def test_top_p_keeps_the_smallest_set_reaching_p(probs, top_p):
    kept = top_p_filter(probs[None], top_p)[0]
    order = probs.argsort(descending=True, stable=True)
    mass_before = probs[order].cumsum(0) - probs[order]
    expected_kept = order[mass_before < top_p - 1e-6]
    assert set((kept > 0).nonzero().flatten().tolist()) >= set(expected_kept.tolist())
    assert probs[kept > 0].sum() >= min(top_p, 1.0) - 1e-5, "the kept tokens reach top_p"
    torch.testing.assert_close(kept.sum(), torch.tensor(1.0))


def test_greedy_is_argmax_and_seeded_sampling_repeats():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    assert torch.equal(sample(logits, SamplingParams(temperature=0)), logits.argmax(-1))
    params = SamplingParams(temperature=0.8, top_p=0.9)
    first = sample(logits, params, torch.Generator().manual_seed(7))
    assert torch.equal(first, sample(logits, params, torch.Generator().manual_seed(7)))


def test_tiny_temperature_is_almost_greedy():
    logits = torch.tensor([[0.0, 1.0, 5.0, 2.0]])
    draws = [sample(logits, SamplingParams(temperature=0.05), torch.Generator().manual_seed(s)).item() for s in range(20)]
    assert draws == [2] * 20


@pytest.mark.parametrize("kwargs", [dict(max_tokens=0), dict(temperature=-0.1), dict(top_p=0.0), dict(top_p=1.1)])
def test_invalid_sampling_params_are_rejected(kwargs):
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)
