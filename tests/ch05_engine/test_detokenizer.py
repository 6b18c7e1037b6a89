"""Incremental detokenization: whole characters only, and the deltas add up to the full decode."""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from miniyaie.engine.detokenizer import IncrementalDetokenizer

TEXTS = [
    "héllo wörld",
    "emoji 😀👍🏽 and a flag 🇫🇷!",
    "中文字符和日本語のテキスト",
    "mixed: 1, 2, 3 — “quotes” ✓ \n\t tabs",
]


@pytest.fixture(scope="module")
def tokenizers(tiny_dir, smollm2_dir):
    from transformers import AutoTokenizer

    return [AutoTokenizer.from_pretrained(tiny_dir[0]), AutoTokenizer.from_pretrained(smollm2_dir)]


def stream(tokenizer, ids, chunk=1):
    d = IncrementalDetokenizer(tokenizer)
    deltas = [d.push(ids[i : i + chunk]) for i in range(0, len(ids), chunk)]
    return deltas, d.finish()


@pytest.mark.task("5.5")
@pytest.mark.parametrize("text", TEXTS)
def test_multibyte_characters_are_never_emitted_in_halves(tokenizers, text):
    for tokenizer in tokenizers:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert any(len(c.encode()) > 1 for c in text)
        deltas, rest = stream(tokenizer, ids)
        assert not any("\ufffd" in d for d in deltas), deltas
        assert "".join(deltas) + rest == text and rest == ""
        if len(ids) > len(text):  # some character spans several tokens: a token alone emitted nothing
            assert "" in deltas


@pytest.mark.task("5.5")
@settings(max_examples=60)
@given(data=st.data(), chunk=st.integers(1, 3), which=st.integers(0, 1))
@example(data=None, chunk=1, which=0)
def test_deltas_add_up_to_the_full_decode_of_random_tokens(tokenizers, data, chunk, which):
    tokenizer = tokenizers[which]
    if data is None:
        ids = tokenizer("a 😀 b", add_special_tokens=False)["input_ids"][1:3]  # half an emoji at the end
    else:
        ids = data.draw(st.lists(st.integers(0, len(tokenizer) - 1), max_size=24))
    deltas, rest = stream(tokenizer, ids, chunk)
    full = tokenizer.decode(ids, skip_special_tokens=True)
    assert "".join(deltas) + rest == full
    running = ""
    for delta in deltas:
        running += delta
        assert full.startswith(running)


@pytest.mark.task("5.5")
def test_special_tokens_are_skipped_or_kept_as_asked(tokenizers):
    tokenizer = tokenizers[0]
    ids = tokenizer("hello", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert "".join(stream(tokenizer, ids)[0]) == "hello"
    d = IncrementalDetokenizer(tokenizer, skip_special_tokens=False)
    assert "".join(d.push([t]) for t in ids) + d.finish() == "hello<|im_end|>"


class CountingTokenizer:
    """A tokenizer that remembers how many tokens each decode call was given."""

    def __init__(self, tokenizer):
        self.tokenizer, self.decoded_lengths = tokenizer, []

    def decode(self, ids, **kwargs):
        self.decoded_lengths.append(len(ids))
        return self.tokenizer.decode(ids, **kwargs)


@pytest.mark.task("5.5")
def test_each_push_decodes_a_short_window_not_the_whole_text(tokenizers):
    tokenizer = CountingTokenizer(tokenizers[1])
    ids = tokenizers[1](" ".join(f"word{i}" for i in range(150)), add_special_tokens=False)["input_ids"]
    d = IncrementalDetokenizer(tokenizer)
    deltas = [d.push([t]) for t in ids]
    longest = max(tokenizer.decoded_lengths)  # finish() may decode everything once, at the end
    assert "".join(deltas) + d.finish() == tokenizers[1].decode(ids)
    assert longest <= 16, (
        f"a push decoded {longest} of {len(ids)} tokens: decoding everything already emitted on every token is "
        "quadratic over a long answer; keep a window of a few tokens before the new ones"
    )


class RewritingTokenizer:
    """A tokenizer whose text for 1, 2 is "ab" but for 1, 2, 3 is "xbc": it rewrites text already shown."""

    def decode(self, ids, skip_special_tokens=True):
        return "xbc"[: len(ids)] if len(ids) >= 3 else "ab"[: len(ids)]


@pytest.mark.task("5.5")
def test_finish_refuses_a_decode_that_rewrites_text_already_shown():
    d = IncrementalDetokenizer(RewritingTokenizer())
    shown = d.push([1]) + d.push([2])
    assert shown == "ab"
    d.push([3])
    with pytest.raises(RuntimeError, match="ab") as refused:
        d.finish()
    assert "xbc" in str(refused.value), "the error names both the text shown and the full decode"


@pytest.mark.task("5.5")
def test_finish_twice_gives_nothing_the_second_time(tokenizers):
    tokenizer = tokenizers[0]
    ids = tokenizer("😀", add_special_tokens=False)["input_ids"][:1]  # the first token of a split emoji
    assert tokenizer.decode(ids).endswith("\ufffd"), "the emoji must be split for this test to mean anything"
    d = IncrementalDetokenizer(tokenizer)
    shown = d.push(ids)
    rest = d.finish()
    assert shown == "" and shown + rest == tokenizer.decode(ids, skip_special_tokens=True)
    assert d.finish() == "", "everything decoded was emitted by the first finish: a second one gives nothing"
