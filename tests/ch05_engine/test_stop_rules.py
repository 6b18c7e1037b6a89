"""What the book says happens to a stop token's text, and to stop strings before min_tokens."""

import pytest

from miniyaie.engine import EngineConfig, InferenceEngine

pytestmark = [pytest.mark.task(f"5.{n}") for n in range(1, 18)]  # end to end, but for own marks
PROMPT = "Once upon a time"
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def run(tiny_loaded):
    """(engine, the greedy output of PROMPT, the index of its first token that is plain visible text)."""
    with InferenceEngine(tiny_loaded, EngineConfig(block_size=4, num_blocks=96)) as engine:
        full = engine.generate(PROMPT, max_tokens=MAX_TOKENS, ignore_eos=True)
        special = set(engine.tokenizer.all_special_ids)
        pieces = [engine.tokenizer.decode([t]) for t in full.token_ids]
        plain = [i for i, (t, p) in enumerate(zip(full.token_ids, pieces))
                 if t not in special and p.strip() and p.isascii() and p.isprintable()]
        assert plain and plain[0] < MAX_TOKENS - 1, f"no plain-text token early enough in {pieces}"
        yield engine, full, plain[0]


def test_a_stop_tokens_text_stays_in_the_output(run):
    engine, full, i = run
    stop_id = full.token_ids[i]
    by_id = engine.generate(PROMPT, max_tokens=MAX_TOKENS, ignore_eos=True, stop_token_ids=[stop_id])
    assert by_id.finish_reason == "stop" and by_id.token_ids == full.token_ids[: i + 1]
    assert by_id.text == engine.tokenizer.decode(full.token_ids[: i + 1], skip_special_tokens=True), (
        "the stop token is the output's last token, and its text is kept (a special token's is skipped)")


def test_a_stop_string_is_cut_and_ends_the_output_even_before_min_tokens(run):
    engine, full, i = run
    stop = engine.tokenizer.decode([full.token_ids[i]]).strip()
    cut = engine.generate(PROMPT, max_tokens=MAX_TOKENS, ignore_eos=True, stop=stop, min_tokens=MAX_TOKENS)
    assert cut.finish_reason == "stop" and cut.text == full.text[: full.text.index(stop)], "cut just before it"
    assert len(cut.token_ids) < MAX_TOKENS, "min_tokens holds back end-of-sequence and stop ids, not stop strings"
    assert cut.token_ids == full.token_ids[: len(cut.token_ids)], "the tokens that completed it are in token_ids"
