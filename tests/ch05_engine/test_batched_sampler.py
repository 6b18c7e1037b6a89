"""Task 5.8: one sampler for the whole batch — stages in the right order, each on the rows that need it.

Every test mixes rows that ask for different things, because the mistakes
this task invites only show in a mixed batch: a stage applied to every row,
or to none, or to the wrong rows; the model's logits edited in place.
"""

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from miniyaie.engine import SamplingParams
from miniyaie.engine.sampler import Sampler, SamplingRow

PROBS = torch.tensor([0.5, 0.3, 0.15, 0.05])  # the model's distribution in most tests below
LOGITS = torch.log(PROBS)


def frequencies(logits_row: torch.Tensor, params: SamplingParams, draws: int = 4000, seed: int = 0) -> torch.Tensor:
    """How often each token comes out when one row is sampled `draws` times (one batch, unseeded rows)."""
    torch.manual_seed(seed)
    rows = [SamplingRow(params, [], []) for _ in range(draws)]
    tokens = torch.tensor([s.token_id for s in Sampler()(logits_row.repeat(draws, 1), rows)])
    return torch.bincount(tokens, minlength=logits_row.numel()).float() / draws


@pytest.mark.task("5.8")
def test_temperature_reshapes_the_distribution_of_sampled_rows():
    """T = 2 flattens: probabilities proportional to p ** (1/2). T = 1 leaves the model's distribution."""
    flat = PROBS.sqrt() / PROBS.sqrt().sum()
    got = frequencies(LOGITS, SamplingParams(temperature=2.0))
    assert torch.allclose(got, flat, atol=0.03), (
        f"with temperature 2 the tokens came out {got.tolist()}, expected about {flat.tolist()}: "
        "divide the logits by the temperature before the softmax"
    )
    got = frequencies(LOGITS, SamplingParams(temperature=1.0), seed=1)
    assert torch.allclose(got, PROBS, atol=0.03), f"temperature 1 must keep the model's distribution, got {got.tolist()}"


@pytest.mark.task("5.8")
def test_the_filters_see_the_tempered_distribution():
    """T = 0.5 sharpens [0.5, 0.3, ...] to [0.68, 0.25, ...]: top_p = 0.6 then keeps token 0 alone.

    Filtering before the temperature would keep tokens 0 and 1 (0.5 < 0.6).
    """
    got = frequencies(LOGITS, SamplingParams(temperature=0.5, top_p=0.6), draws=500)
    assert got[0] == 1.0, (
        f"token 0 came out {got[0]:.0%} of the time, expected always: top_p must count the probabilities "
        "after the temperature (divide by the temperature, then filter, then draw)"
    )


@pytest.mark.task("5.8")
@settings(max_examples=20)
@given(
    seed=st.integers(0, 2**31 - 1),
    position=st.integers(0, 3),
    mates=st.lists(st.sampled_from(["greedy", "hot", "seeded", "penalised", "masked"]), max_size=3),
)
@example(seed=0, position=0, mates=["greedy", "greedy", "greedy"])
@example(seed=1, position=3, mates=["hot", "seeded", "masked"])
def test_a_seeded_row_samples_the_same_whatever_shares_its_batch(seed, position, mates):
    """Rows are independent: a seeded row's tokens depend on its logits, settings and seed alone."""
    vocab = 32
    logits = torch.randn(1, vocab, generator=torch.Generator().manual_seed(seed % 1000)) * 2
    params = SamplingParams(temperature=0.9, top_k=20, top_p=0.95, seed=seed)

    def row(generator_seed: int) -> SamplingRow:
        return SamplingRow(params, [1, 2], [3], generator=torch.Generator().manual_seed(generator_seed))

    alone_row = row(seed)
    alone = [Sampler()(logits, [alone_row])[0].token_id for _ in range(4)]

    kinds = {
        "greedy": lambda: SamplingRow(SamplingParams(), [0], []),
        "hot": lambda: SamplingRow(SamplingParams(temperature=1.5, top_k=3), [0], []),
        "seeded": lambda: SamplingRow(SamplingParams(temperature=1.0, seed=7), [0], [], generator=torch.Generator().manual_seed(7)),
        "penalised": lambda: SamplingRow(SamplingParams(repetition_penalty=1.8, temperature=0.7), [0, 5], [6]),
        "masked": lambda: SamplingRow(SamplingParams(temperature=1.0), [0], [], allowed=torch.arange(vocab) < 4),
    }
    batch_rows = [kinds[k]() for k in mates]
    position = min(position, len(batch_rows))
    together_row = row(seed)
    batch_rows.insert(position, together_row)
    batch_logits = torch.randn(len(batch_rows), vocab, generator=torch.Generator().manual_seed(99)) * 3
    batch_logits[position] = logits[0]
    together = [Sampler()(batch_logits, batch_rows)[position].token_id for _ in range(4)]
    assert together == alone, (
        f"a seeded row drew {alone} alone but {together} at position {position} among {mates}: each sampled "
        "row must draw from its own logits, with its own settings and its own generator"
    )


@pytest.mark.task("5.8")
def test_greedy_rows_take_the_argmax_and_ignore_the_sampled_rows_settings():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0]]).repeat(3, 1)
    rows = [
        SamplingRow(SamplingParams(temperature=5.0, top_k=1), [], [], generator=torch.Generator().manual_seed(0)),
        SamplingRow(SamplingParams(), [], []),  # greedy, between two sampled rows
        SamplingRow(SamplingParams(temperature=5.0, top_k=2, seed=1), [], [], generator=torch.Generator().manual_seed(1)),
    ]
    for _ in range(20):
        a, b, c = (s.token_id for s in Sampler()(logits, rows))
        assert b == 1, f"a greedy row chose {b}, not its argmax 1"
        assert a == 1, f"top_k = 1 leaves only the argmax, but the row drew {a}"
        assert c in (1, 2), f"top_k = 2 keeps tokens 1 and 2, but the row drew {c}"


@pytest.mark.task("5.8")
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_structured_output_masks_only_its_own_rows(temperature):
    logits = torch.tensor([[0.0, 1.0, 9.0, 2.0, 3.0, 4.0]]).repeat(2, 1)
    allowed = torch.tensor([True, True, False, False, False, False])
    for seed in range(20):
        rows = [
            SamplingRow(SamplingParams(temperature=temperature), [], [], generator=torch.Generator().manual_seed(seed), allowed=allowed),
            SamplingRow(SamplingParams(), [], []),
        ]
        masked, free = (s.token_id for s in Sampler()(logits, rows))
        assert masked in (0, 1), f"a row allowed only tokens 0 and 1 chose {masked}"
        if temperature == 0:
            assert masked == 1, f"greedy under a mask is the argmax of the allowed tokens (1), got {masked}"
        assert free == 2, f"a row without a mask chose {free}, not its argmax 2: another row's mask leaked into it"


@pytest.mark.task("5.8")
def test_min_tokens_holds_back_stop_tokens_from_sampled_rows_too():
    logits = torch.tensor([[0.0, 8.0, 1.0, 1.0]]).repeat(2, 1)
    young = SamplingRow(SamplingParams(temperature=1.0, min_tokens=3), [0], [2], stop_token_ids=[1, 99])
    grown = SamplingRow(SamplingParams(temperature=1.0, min_tokens=1), [0], [2], stop_token_ids=[1])
    drawn_young, drawn_grown = set(), set()
    torch.manual_seed(0)
    for _ in range(50):
        a, b = (s.token_id for s in Sampler()(logits, [young, grown]))
        drawn_young.add(a)
        drawn_grown.add(b)
    assert 1 not in drawn_young, "a row with fewer than min_tokens outputs drew its stop token"
    assert 1 in drawn_grown, "a row past min_tokens never drew its (most likely) stop token: the ban must end"


@pytest.mark.task("5.8")
@pytest.mark.parametrize("outside", [4, 5, 99])
def test_a_stop_id_outside_the_vocabulary_is_ignored_by_min_tokens(outside):
    logits = torch.tensor([[0.0, 8.0, 1.0, 1.0]]).repeat(2, 1)  # a vocabulary of 4 ids: 0 to 3
    both = SamplingRow(SamplingParams(temperature=0.0, min_tokens=3), [0], [2], stop_token_ids=[1, outside])
    only_outside = SamplingRow(SamplingParams(temperature=0.0, min_tokens=3), [0], [2], stop_token_ids=[outside])
    try:
        got = [s.token_id for s in Sampler()(logits, [both, only_outside])]
    except (IndexError, RuntimeError) as exc:
        pytest.fail(f"stop id {outside} is outside the vocabulary (ids 0 to 3), so min_tokens has nothing to hold back "
                    f"for it: ignore ids >= V instead of failing ({type(exc).__name__}: {exc})")
    assert got[0] == 2, f"the row whose stop ids are 1 and {outside} must skip 1 while under min_tokens, got {got[0]}"
    assert got[1] == 1, f"the row whose only stop id ({outside}) is outside the vocabulary bans nothing, got {got[1]}"


@pytest.mark.task("5.8")
@pytest.mark.parametrize("batch", ["every stage at once", "a mask alone"])
def test_the_models_logits_are_left_as_they_were(batch):
    """Each stage edits out of place, also when it is the only stage that runs (a mask alone edits first)."""
    logits = torch.tensor([[0.0, 8.0, 1.0, 2.0, 3.0]] * 4)
    before = logits.clone()
    masked = SamplingRow(SamplingParams(), [0], [], allowed=torch.tensor([True, False, True, False, False]))
    rows = [
        SamplingRow(SamplingParams(repetition_penalty=2.0, presence_penalty=1.0), [1], [1]),
        SamplingRow(SamplingParams(min_tokens=2), [0], [], stop_token_ids=[1]),
        SamplingRow(SamplingParams(temperature=0.7, top_k=2), [0], [], generator=torch.Generator().manual_seed(0)),
        masked,
    ] if batch == "every stage at once" else [SamplingRow(SamplingParams(), [0], []) for _ in range(3)] + [masked]
    Sampler()(logits, rows)
    assert torch.equal(logits, before), (
        "the sampler changed the logits it was given (they may be the model's output, read again by the "
        f"caller): now {logits.tolist()}; make every edit out of place"
    )


@pytest.mark.task("5.8")
def test_logprobs_are_the_models_before_penalties_masks_and_temperature():
    logits = torch.tensor([[2.0, 5.0, 1.0, 4.0, 0.0]])
    model = torch.log_softmax(logits[0], -1)
    row = SamplingRow(
        SamplingParams(temperature=0.3, top_k=2, repetition_penalty=3.0, min_tokens=1, logprobs=3),
        [1], [], stop_token_ids=[3], generator=torch.Generator().manual_seed(0),
    )
    (got,) = Sampler()(logits, [row])
    assert got.token_id in (0, 1), f"drew {got.token_id}: top_k = 2 after the penalty and the ban leaves tokens 0 and 1"
    assert got.logprob == pytest.approx(model[got.token_id].item()), "the chosen token's logprob is the model's"
    top = [(t, pytest.approx(v)) for t, v in zip(model.topk(3).indices.tolist(), model.topk(3).values.tolist())]
    assert got.top_logprobs == top, (
        f"top_logprobs {got.top_logprobs} are not the model's three likeliest tokens {top}: "
        "take the logprobs from the raw logits, before anything edits them"
    )


VOCAB = 12
histories = st.lists(st.integers(0, VOCAB - 1), max_size=6)


@pytest.mark.task("5.8")
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(histories, histories), min_size=1, max_size=4), st.integers(0, 2**16))
@example([([], []), ([3, 3], []), ([], [5, 5, 5]), ([1], [1, 2])], 0)
def test_each_greedy_row_is_penalised_by_its_own_prompt_and_output(prompts_and_outputs, seed):
    """Every row greedy with all three penalties: the choice must be the argmax of that row's logits after
    penalties over its own history (prompt or output seen; only the output counted), whatever its neighbours."""
    from miniyaie.engine.sampling_stages import apply_penalties

    logits = torch.randn(len(prompts_and_outputs), VOCAB, generator=torch.Generator().manual_seed(seed))
    params = SamplingParams(repetition_penalty=1.7, presence_penalty=0.9, frequency_penalty=0.6)
    rows = [SamplingRow(params, prompt, output) for prompt, output in prompts_and_outputs]
    got = [s.token_id for s in Sampler()(logits, rows)]
    for i, (prompt, output) in enumerate(prompts_and_outputs):
        counts = torch.bincount(torch.tensor(output, dtype=torch.int64), minlength=VOCAB).float()[None]
        seen = torch.zeros(1, VOCAB, dtype=torch.bool)
        seen[0, list(prompt) + list(output)] = True
        one = lambda value: torch.tensor([value])  # noqa: E731
        expected = apply_penalties(logits[i:i + 1], seen, counts, one(1.7), one(0.9), one(0.6)).argmax(-1).item()
        assert got[i] == expected, (
            f"row {i} (prompt {prompt}, output {output}) chose {got[i]}, its penalised argmax is {expected}: each row's "
            "history is its own; a token seen in the prompt or output is penalised by repetition, only output tokens "
            "count for presence and frequency (and lists of different lengths must not leak padding into a row)")


@pytest.mark.task("5.8")
@given(st.lists(st.one_of(st.none(), st.integers(0, 4)), min_size=1, max_size=5))
@example([None, 0, 3])
@example([2, None])
def test_each_row_gets_the_logprobs_it_asked_for(wanted):
    logits = torch.randn(len(wanted), 6, generator=torch.Generator().manual_seed(len(wanted)))
    rows = [SamplingRow(SamplingParams(logprobs=k), [], []) for k in wanted]
    model = torch.log_softmax(logits, -1)
    outputs = Sampler()(logits, rows)
    assert len(outputs) == len(wanted), f"{len(wanted)} rows gave {len(outputs)} SampledTokens: one per row, whatever it asked"
    for i, (k, got) in enumerate(zip(wanted, outputs)):
        assert got.token_id == model[i].argmax().item()
        if k is None:
            assert got.logprob is None and not got.top_logprobs, f"row {i} asked for no logprobs"
            continue
        assert got.logprob == pytest.approx(model[i, got.token_id].item())
        best = model[i].topk(k) if k else None
        expected = list(zip(best.indices.tolist(), best.values.tolist())) if k else []
        assert [t for t, _ in got.top_logprobs] == [t for t, _ in expected], (
            f"row {i} asked for its {k} likeliest tokens, likeliest first; got {got.top_logprobs}")
        assert [v for _, v in got.top_logprobs] == pytest.approx([v for _, v in expected])


@pytest.mark.task("5.8")
@pytest.mark.parametrize("setting", [dict(min_p=0.5), dict(top_p=0.6), dict(top_k=1)], ids=["min_p", "top_p", "top_k"])
def test_a_row_with_a_single_filter_is_filtered(setting):
    """A sampled row whose only filter is min_p (or top_p, or top_k) is filtered: 0.15 and 0.05 are below
    0.5 * 0.5 and outside the top 0.6 of [0.5, 0.3, 0.15, 0.05]; only token 0 is in the top 1."""
    allowed = {"min_p": {0, 1}, "top_p": {0, 1}, "top_k": {0}}[next(iter(setting))]
    got = frequencies(LOGITS, SamplingParams(temperature=1.0, **setting), draws=2000, seed=2)
    drawn = {i for i, f in enumerate(got.tolist()) if f > 0}
    assert drawn <= allowed, f"with {setting} the sampler drew tokens {sorted(drawn - allowed)}, which that filter removes"


@pytest.mark.task("5.8")
@pytest.mark.parametrize("setting", [dict(repetition_penalty=3.0), dict(repetition_penalty=2.0), dict(presence_penalty=2.0),
                                     dict(frequency_penalty=2.0)], ids=["repetition", "repetition-2", "presence", "frequency"])
def test_a_batch_whose_only_penalty_is_one_kind_is_penalised(setting):
    """Every row greedy with one penalty alone, token 0 (the model's favourite) in its output: penalised,
    token 0 falls below token 1 (log 0.5 * 3 and log 0.5 * 2 < log 0.3; log 0.5 - 2 < log 0.3), so token 1 is chosen."""
    rows = [SamplingRow(SamplingParams(temperature=0.0, **setting), [2], [0]) for _ in range(2)]
    got = [s.token_id for s in Sampler()(LOGITS.repeat(2, 1), rows)]
    assert got == [1, 1], f"with only {setting} the rows chose {got}, expected [1, 1]: a penalty set alone must still apply"
