"""Task 4.3: sort-free sampling picks the same token as the sort-based reference for the same uniforms."""

import pytest
import torch
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st
from kernel_cases import generator

from miniyaie.kernels import sample, sample_reference

rows = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.5, 1.0, 2.0]),  # temperature
        st.sampled_from([0, 1, 2, 7, 50]),  # top-k (0 = off)
        st.sampled_from([1.0, 0.95, 0.5, 0.1]),  # top-p
        st.sampled_from([0.0, 0.05, 0.3]),  # min-p
        st.floats(0, 1, exclude_max=True),  # the uniform
    ),
    min_size=1, max_size=4,
)


def batch(params, vocab, seed):
    logits = torch.randn(len(params), vocab, generator=generator(seed)) * 3
    columns = list(zip(*params))
    temperature, min_p, top_p, uniforms = (torch.tensor(columns[i], dtype=torch.float32) for i in (0, 3, 2, 4))
    return logits, temperature, torch.tensor(columns[1]), top_p, min_p, uniforms


@pytest.mark.task("4.3")
# No shrinking: each example is dozens of passes over the row in the interpreter, and shrinking a wrong kernel's
# first failure took minutes, past the test's time limit, whose message then hid the wrong token.
@settings(max_examples=8, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(params=rows, vocab=st.sampled_from([50, 1000, 2500]), seed=st.integers(0, 2**16))
@example(params=[(0.0, 0, 1.0, 0.0, 0.5)], vocab=50, seed=0)  # greedy
@example(params=[(1.0, 1, 1.0, 0.0, 0.99)], vocab=1000, seed=1)  # top-k 1 is greedy whatever u
@example(params=[(1.0, 0, 1.0, 0.0, 0.0), (1.0, 0, 1.0, 0.0, 0.999999)], vocab=1000, seed=2)  # both ends of the CDF
@example(params=[(2.0, 7, 0.5, 0.05, 0.7)], vocab=2500, seed=3)  # every filter at once
def test_kernel_picks_the_reference_token(params, vocab, seed):
    args = batch(params, vocab, seed)
    ours, expected = sample(*args).tolist(), sample_reference(*args).tolist()
    assert ours == expected, (
        f"rows (temperature, top_k, top_p, min_p, u) = {params}: the kernel picked {ours}, the reference {expected}"
    )


@pytest.mark.task("4.3")
def test_filters_bound_the_choice():
    """Over many uniforms: top-k 3 picks only the 3 likeliest, greedy the likeliest, and every kept token comes up."""
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.5, -1.0, 2.9]])
    uniforms = torch.linspace(0, 0.999, 24)
    picked = {
        int(sample(logits, torch.tensor([1.0]), torch.tensor([3]), torch.tensor([1.0]), torch.tensor([0.0]), u[None]))
        for u in uniforms
    }
    assert picked == {1, 3, 5}, (
        f"top-k 3 over 24 uniforms picked tokens {sorted(picked)}: only the 3 likeliest (1, 3, 5) may come up, and each must"
    )
    greedy = sample(logits.repeat(2, 1), torch.zeros(2), torch.zeros(2, dtype=torch.int64), torch.ones(2), torch.zeros(2), torch.rand(2))
    assert greedy.tolist() == [1, 1], f"temperature 0 is greedy: token 1 for both rows, got {greedy.tolist()}"
