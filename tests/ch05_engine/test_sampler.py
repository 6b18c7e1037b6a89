"""The batched sampler: penalties, filters and seeded draws, each against its definition."""

import math

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from miniyaie.engine import SamplingParams
from miniyaie.engine.sampler import Sampler, SamplingRow
from miniyaie.engine.sampling_stages import apply_penalties, draw, filter_logits, token_histories


def rows_of_logits(batch: int, vocab: int, seed: int) -> torch.Tensor:
    return torch.randn(batch, vocab, generator=torch.Generator().manual_seed(seed)) * 3


# ---------------------------------------------------------------- 5.2 penalties
@pytest.mark.task("5.2")
@given(
    seed=st.integers(0, 10_000),
    repetition=st.floats(0.5, 2.0),
    presence=st.floats(-2, 2),
    frequency=st.floats(-2, 2),
    prompt=st.lists(st.integers(0, 11), max_size=6),
    output=st.lists(st.integers(0, 11), max_size=8),
)
@example(seed=0, repetition=1.5, presence=0.0, frequency=0.0, prompt=[0, 1, 2, 3], output=[])
@example(seed=1, repetition=1.0, presence=0.5, frequency=0.25, prompt=[5], output=[7, 7, 7, 2])
def test_penalties_follow_their_definitions(seed, repetition, presence, frequency, prompt, output):
    vocab = 12
    logits = rows_of_logits(1, vocab, seed)
    seen = torch.zeros(1, vocab, dtype=torch.bool)
    counts = torch.zeros(1, vocab)
    for t in prompt + output:
        seen[0, t] = True
    for t in output:
        counts[0, t] += 1
    got = apply_penalties(logits, seen, counts, torch.tensor([repetition]), torch.tensor([presence]), torch.tensor([frequency]))
    for t in range(vocab):
        x = logits[0, t].item()
        if t in prompt or t in output:
            x = x / repetition if x > 0 else x * repetition
        x -= frequency * output.count(t) + (presence if t in output else 0.0)
        assert got[0, t].item() == pytest.approx(x, rel=1e-5, abs=1e-5), f"token {t}"


@pytest.mark.task("5.2")
@given(rows=st.lists(st.tuples(st.lists(st.integers(0, 11), max_size=6), st.lists(st.integers(0, 11), max_size=8)),
                     min_size=1, max_size=4))
@example(rows=[([], [])])
@example(rows=[([], []), ([], [])])
@example(rows=[([3, 3], []), ([], [11, 11, 11, 0])])
@example(rows=[([0, 1, 2, 3, 4, 5], [5]), ([11], [])])
def test_histories_mark_every_token_seen_and_count_the_outputs_row_by_row(rows):
    """Ragged rows (empty lists too, the last id of the vocabulary, repeats): each row's own history, nothing from
    its neighbours, and padding that counts for nothing."""
    vocab = 12
    prompts, outputs = [p for p, _ in rows], [o for _, o in rows]
    seen, counts = token_histories(prompts, outputs, vocab)
    assert tuple(seen.shape) == tuple(counts.shape) == (len(rows), vocab), (
        f"expected [B, V] = [{len(rows)}, {vocab}] for both, got {tuple(seen.shape)} and {tuple(counts.shape)}")
    assert seen.dtype == torch.bool, f"seen must be a bool tensor, got {seen.dtype}"
    for b, (prompt, output) in enumerate(rows):
        want_seen = [t in prompt or t in output for t in range(vocab)]
        want_counts = [float(output.count(t)) for t in range(vocab)]
        assert seen[b].tolist() == want_seen, (
            f"row {b} (prompt {prompt}, output {output}): seen {seen[b].nonzero().flatten().tolist()}, "
            f"expected the tokens of its prompt or output {[t for t in range(vocab) if want_seen[t]]}")
        assert counts[b].tolist() == want_counts, (
            f"row {b} (prompt {prompt}, output {output}): counts {counts[b].tolist()}, expected how often each "
            f"token is in the output (the prompt does not count) {want_counts}")


@pytest.mark.task("5.2")
def test_penalties_are_per_row():
    logits = torch.tensor([[2.0, -2.0, 1.0], [2.0, -2.0, 1.0]])
    seen = torch.tensor([[True, True, False], [True, True, False]])
    counts = torch.tensor([[1.0, 0.0, 0.0], [2.0, 0.0, 0.0]])
    got = apply_penalties(logits, seen, counts, torch.tensor([2.0, 1.0]), torch.tensor([0.0, 0.5]), torch.tensor([0.0, 1.0]))
    want = torch.tensor([[1.0, -4.0, 1.0], [2.0 - 2.0 - 0.5, -2.0, 1.0]])
    assert torch.allclose(got, want), (
        f"row 0 has only a repetition penalty of 2, row 1 only presence 0.5 and frequency 1: each row's own "
        f"settings apply to it alone; expected {want.tolist()}, got {got.tolist()}")


@pytest.mark.task("5.8")  # the whole sampler: Task 5.8 puts the penalties of 5.2 in front of the argmax
def test_the_sampler_applies_penalties_to_greedy_rows():
    logits = torch.tensor([[5.0, 4.0, 0.0, -1.0]])
    plain = SamplingRow(SamplingParams(), [0], [])
    penalised = SamplingRow(SamplingParams(repetition_penalty=2.0), [0], [])
    repeated = SamplingRow(SamplingParams(frequency_penalty=2.0), [3], [0])
    assert [s.token_id for s in Sampler()(logits.repeat(3, 1), [plain, penalised, repeated])] == [0, 1, 1]


# ---------------------------------------------------------------- 5.3 top-k, top-p, min-p
def kept_by_definition(logits_row: list[float], k: int, p: float, min_p: float) -> set[int]:
    order = sorted(range(len(logits_row)), key=lambda i: -logits_row[i])
    if k > 0:
        order = order[:k]
    top = max(logits_row[i] for i in order)
    weights = {i: math.exp(logits_row[i] - top) for i in order}
    total = sum(weights.values())
    kept, mass = [], 0.0
    for i in order:
        if mass >= p and kept:
            break
        kept.append(i)
        mass += weights[i] / total
    return {i for i in kept if weights[i] / total >= min_p * (weights[order[0]] / total)}


@pytest.mark.task("5.3")
@given(
    seed=st.integers(0, 10_000),
    k=st.integers(-1, 12),
    p=st.floats(0.05, 1.0),
    min_p=st.floats(0.0, 0.9),
)
@example(seed=0, k=1, p=1.0, min_p=0.0)
@example(seed=1, k=0, p=0.5, min_p=0.0)
@example(seed=2, k=3, p=1.0, min_p=0.0)
@example(seed=3, k=0, p=1.0, min_p=0.5)
@example(seed=4, k=12, p=0.9, min_p=0.1)
def test_filters_keep_exactly_the_tokens_their_definitions_keep(seed, k, p, min_p):
    logits = rows_of_logits(1, 10, seed)
    probs = torch.softmax(logits, -1)[0]
    nearly_tied = probs.sort(descending=True).values
    if k > 0 and k < 10 and abs(nearly_tied[k - 1] - nearly_tied[k]) < 1e-6:
        return  # a tie at the k-th place may go either way
    got = filter_logits(logits, torch.tensor([k]), torch.tensor([p]), torch.tensor([min_p]))
    kept = {i for i in range(10) if got[0, i] > float("-inf")}
    assert kept == kept_by_definition(logits[0].tolist(), k, p, min_p)
    assert torch.equal(got[0, list(kept)], logits[0, list(kept)]), "kept logits are unchanged"


@pytest.mark.task("5.3")
def test_filters_are_per_row_and_keep_the_token_crossing_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]] * 3))
    got = filter_logits(logits, torch.tensor([0, 2, 0]), torch.tensor([0.6, 1.0, 1.0]), torch.tensor([0.0, 0.0, 0.2]))
    kept = (got > float("-inf")).tolist()
    assert kept == [[True, True, False, False], [True, True, False, False], [True, True, True, False]]


@pytest.mark.task("5.8")  # the whole sampler (Task 5.8) over 5.3's filters and 5.4's draw
@settings(max_examples=25)
@given(seed=st.integers(0, 1000), k=st.integers(1, 5), p=st.floats(0.1, 1.0))
def test_sampling_never_picks_a_filtered_token(seed, k, p):
    logits = rows_of_logits(4, 16, seed)
    params = SamplingParams(temperature=1.5, top_k=k, top_p=p, seed=seed)
    allowed = filter_logits(logits / 1.5, torch.tensor([k] * 4), torch.tensor([p] * 4), torch.zeros(4)) > float("-inf")
    rows = [SamplingRow(params, [], [], generator=torch.Generator().manual_seed(seed + i)) for i in range(4)]
    for _ in range(5):
        tokens = [s.token_id for s in Sampler()(logits, rows)]
        assert all(allowed[i, t] for i, t in enumerate(tokens))


# ---------------------------------------------------------------- 5.4 the draw
@pytest.mark.task("5.4")
def test_draw_follows_the_distribution():
    probs = torch.tensor([[0.1, 0.2, 0.0, 0.7]]).repeat(4000, 1)
    torch.manual_seed(0)
    tokens = draw(probs, [None] * 4000)
    freq = torch.bincount(tokens, minlength=4).float() / 4000
    assert freq[2] == 0, "a zero-probability token is never drawn"
    assert torch.allclose(freq, torch.tensor([0.1, 0.2, 0.0, 0.7]), atol=0.03), freq


@pytest.mark.task("5.4")
@given(seed=st.integers(0, 2**31), mates=st.integers(0, 5), position=st.integers(0, 5))
def test_a_seeded_row_draws_the_same_whatever_its_batch_mates(seed, mates, position):
    probs = torch.softmax(rows_of_logits(1, 50, 7), -1)
    generator = torch.Generator().manual_seed(seed)
    alone = [draw(probs, [generator]).item() for _ in range(3)]
    position = min(position, mates)
    batch = torch.softmax(rows_of_logits(mates + 1, 50, seed % 97), -1)
    batch[position] = probs[0]
    generators = [None] * (mates + 1)
    generators[position] = torch.Generator().manual_seed(seed)
    together = [draw(batch, generators)[position].item() for _ in range(3)]
    assert together == alone


@pytest.mark.task("5.4")
def test_different_seeds_draw_different_sequences():
    probs = torch.full((1, 64), 1 / 64)
    sequences = set()
    for seed in range(4):
        generator = torch.Generator().manual_seed(seed)
        sequences.add(tuple(draw(probs, [generator]).item() for _ in range(8)))
    assert len(sequences) == 4


# ---------------------------------------------------------------- the whole sampler (Task 5.8)
@pytest.mark.task("5.8")
def test_min_tokens_masks_end_of_sequence_and_logprobs_are_the_models():
    logits = torch.tensor([[0.0, 9.0, 1.0, 2.0]])
    early = SamplingRow(SamplingParams(min_tokens=2, logprobs=2), [0], [1], stop_token_ids=[1])
    late = SamplingRow(SamplingParams(min_tokens=2, logprobs=0), [0], [1, 3], stop_token_ids=[1])
    a, b = Sampler()(logits.repeat(2, 1), [early, late])
    assert a.token_id == 3 and b.token_id == 1
    model_logprobs = torch.log_softmax(logits[0], -1)
    assert a.logprob == pytest.approx(model_logprobs[3].item())
    assert [t for t, _ in a.top_logprobs] == [1, 3] and a.top_logprobs[0][1] == pytest.approx(model_logprobs[1].item())
    assert b.top_logprobs == []
