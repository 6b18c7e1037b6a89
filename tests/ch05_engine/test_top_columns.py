"""The sampler's fast path (engine/top_columns.py, provided) against the plain path it replaces.

The fast path runs Task 5.3's filter on each row's top-k columns and Task
5.4's draw on the kept columns only. It must give exactly what the plain
path gives: the same filtered logits, bit for bit, hence the same tokens
with the same seeds. Hypothesis draws batches with ties at the cutoff,
rows without a top_k, top_p 1, min_p, and rows whose kept tokens tie beyond
their top-k columns (the fast path's way back to the plain path), over a
small vocabulary and over SmolLM2's 49,152 tokens.
"""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from miniyaie.engine import SamplingParams
from miniyaie.engine import top_columns
from miniyaie.engine.sampler import Sampler, SamplingRow
from miniyaie.engine.sampling_stages import filter_logits
from miniyaie.engine.top_columns import COUNTS, filter_on_columns, plain, sample_top_columns

pytestmark = [pytest.mark.task(f"5.{n}") for n in range(1, 18)]  # end to end, but for own marks

REAL_VOCAB = 49152  # SmolLM2's


def batch(data, rows: int, vocab: int):
    """Float32 logits with many ties (a few distinct levels, some -inf) and per-row settings."""
    levels = data.draw(st.lists(st.floats(-8, 8, width=32), min_size=1, max_size=6), label="levels")
    seed = data.draw(st.integers(0, 2**31 - 1), label="seed")
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g) * data.draw(st.sampled_from([0.5, 3.0, 8.0]), label="scale")
    picks = torch.tensor(levels)[torch.randint(len(levels), (rows, vocab), generator=g)]
    tied = torch.rand(rows, vocab, generator=g) < data.draw(st.sampled_from([0.0, 0.5, 1.0]), label="tied share")
    logits = torch.where(tied, picks, logits)
    logits[torch.rand(rows, vocab, generator=g) < 0.05] = float("-inf")
    logits[:, 0] = 9.0  # every row keeps a finite token
    ks = [1, 2, 5, 50] if data.draw(st.booleans(), label="every row has a small top_k") else [0, 1, 5, 50, vocab]
    top_k = data.draw(st.lists(st.sampled_from(ks), min_size=rows, max_size=rows), label="top_k")
    top_p = data.draw(st.lists(st.sampled_from([1.0, 0.9, 0.5, 0.01]) | st.floats(0.01, 1.0),
                               min_size=rows, max_size=rows), label="top_p")
    min_p = data.draw(st.lists(st.sampled_from([0.0, 0.0, 0.05, 0.5]), min_size=rows, max_size=rows), label="min_p")
    return logits, torch.tensor(top_k), torch.tensor(top_p, dtype=torch.float32), torch.tensor(min_p, dtype=torch.float32)


def generators(seeds):
    return [None if s is None else torch.Generator().manual_seed(s) for s in seeds]


def assert_same_as_plain(logits, top_k, top_p, min_p, seeds):
    narrowed = filter_on_columns(logits, top_k, top_p, min_p)
    if narrowed is not None:
        filtered, ids = narrowed
        want = filter_logits(logits, top_k, top_p, min_p)
        assert torch.equal(filtered, want), "the fast path must mask exactly the tokens the plain filter masks"
        kept = want > float("-inf")
        assert kept.sum(-1).tolist() == kept.gather(1, ids).sum(-1).tolist(), "a kept token is outside its row's columns"
    torch.manual_seed(1)  # the unseeded rows' draws come from the global generator
    fast = sample_top_columns(logits, top_k, top_p, min_p, generators(seeds))
    torch.manual_seed(1)
    slow = plain(logits, top_k, top_p, min_p, generators(seeds))
    assert fast.tolist() == slow.tolist(), "the fast path must draw the plain path's tokens with the same seeds"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), rows=st.integers(1, 5), vocab=st.sampled_from([7, 64, 300]))
def test_the_fast_path_filters_and_draws_exactly_as_the_plain_path(data, rows, vocab):
    logits, top_k, top_p, min_p = batch(data, rows, vocab)
    seeds = data.draw(st.lists(st.none() | st.integers(0, 1000), min_size=rows, max_size=rows), label="seeds")
    assert_same_as_plain(logits, top_k, top_p, min_p, seeds)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), rows=st.integers(1, 4))
def test_the_fast_path_is_exact_at_a_real_vocabulary_size(data, rows):
    logits, top_k, top_p, min_p = batch(data, rows, REAL_VOCAB)
    assert_same_as_plain(logits, top_k, top_p, min_p, list(range(rows)))


@pytest.mark.parametrize("case", ["tie beyond the columns", "no top_k", "top_k over the limit", "top_k 50"])
def test_each_way_is_counted_and_exact(case):
    vocab = 2000
    logits = torch.randn(3, vocab, generator=torch.Generator().manual_seed(0)) * 4
    top_k, top_p, min_p = torch.tensor([50, 50, 5]), torch.tensor([0.9, 1.0, 0.5]), torch.tensor([0.0, 0.05, 0.0])
    if case == "tie beyond the columns":  # top_k 3 keeps 3 tokens tied with 97 more: all 100 are kept
        logits[0] = float("-inf")
        logits[0, :100] = 1.0
        top_k, top_p = torch.tensor([3, 50, 5]), torch.tensor([1.0, 1.0, 0.5])
    elif case == "no top_k":
        top_k = torch.tensor([50, 0, 5])
    elif case == "top_k over the limit":
        top_k = torch.tensor([50, top_columns.MAX_COLUMNS + 1, 5])
    before = COUNTS.copy()
    assert_same_as_plain(logits, top_k, top_p, min_p, [3, None, 4])
    took = {way: COUNTS[way] - before[way] for way in ("columns", "whole rows")}
    # assert_same_as_plain runs the fast path once and the plain path (3 whole rows) once
    assert took == ({"columns": 3, "whole rows": 3} if case == "top_k 50" else {"columns": 0, "whole rows": 6}), took


def test_the_sampler_runs_the_learners_filter_on_the_top_k_columns():
    """On the hot path: a batch with top_k 50 goes through sample_top_columns, whose filter is Task 5.3's, on 50 columns."""
    seen = []

    def spy(logits, *args):
        seen.append(tuple(logits.shape))
        return filter_logits(logits, *args)

    rows = [SamplingRow(SamplingParams(temperature=0.7, top_p=0.9, top_k=50, seed=i), [1], [2],
                        generator=torch.Generator().manual_seed(i)) for i in range(4)]
    logits = torch.randn(4, 3000, generator=torch.Generator().manual_seed(5))
    before = COUNTS["columns"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(top_columns, "filter_logits", spy)
        Sampler()(logits, rows)
    assert seen == [(4, 50)], f"the sampler must filter the 50 best columns of each row with Task 5.3's filter, saw {seen}"
    assert COUNTS["columns"] - before == 4
