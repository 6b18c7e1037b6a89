"""Task 5.5 with a SentencePiece-style tokenizer: a token's leading space shows only in context.

Byte-level tokenizers (the tiny model's, SmolLM2's) spell a space inside
the token, so decoding each token alone happens to work for them. A
Metaspace tokenizer (Llama 2, Mistral, T5) marks a word start with `▁` and
its decoder drops the space at the start of the decoded text: "▁world"
alone decodes to "world", after "▁Hello" to " world". Only a detokenizer
that decodes a window reaching back before the new tokens gets the spaces.
The tokenizer is built here from a fixed vocabulary: nothing downloads.
"""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.engine.detokenizer import IncrementalDetokenizer

PIECES = ["<unk>", "</s>", "▁", "▁Hello", "▁world", "▁how", "▁are", "▁you", "!", "▁we", "'", "ll", "▁see", "?",
          "é", "▁caf", "▁a", "b"]
TEXT = "Hello world how are you! we'll see? café"


@pytest.fixture(scope="module")
def metaspace():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.Unigram([(piece, 0.0) for piece in PIECES], unk_id=0))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", eos_token="</s>")
    ids = fast(TEXT, add_special_tokens=False)["input_ids"]
    assert fast.decode(ids) == TEXT and fast.decode(ids[1:2]) == "world", "the tokenizer is not Metaspace-like"
    return fast


def deltas_of(tokenizer, ids, chunk=1):
    d = IncrementalDetokenizer(tokenizer)
    return [d.push(ids[i : i + chunk]) for i in range(0, len(ids), chunk)], d


@pytest.mark.task("5.5")
def test_each_word_gets_its_leading_space_from_the_token_before(metaspace):
    ids = metaspace(TEXT, add_special_tokens=False)["input_ids"]
    deltas, _ = deltas_of(metaspace, ids)
    assert "".join(deltas) == TEXT, (
        f"streamed {''.join(deltas)!r}: a token decoded alone loses the space its '▁' stands for; "
        "decode a window that starts before the new tokens and emit what the window's text gained"
    )
    assert deltas[:3] == ["Hello", " world", " how"], deltas


@pytest.mark.task("5.5")
@given(words=st.lists(st.sampled_from(PIECES[1:]), min_size=1, max_size=12), chunk=st.integers(1, 3))
@example(words=["▁a", "b", "▁a", "▁", "b"], chunk=1)
@example(words=["▁Hello", "</s>", "▁world"], chunk=1)  # a skipped special token adds no text: keep the context before it
@example(words=["▁", "▁", "▁Hello"], chunk=2)
def test_streamed_text_is_the_full_decode_at_every_step(metaspace, words, chunk):
    ids = metaspace.convert_tokens_to_ids(words)
    deltas, detokenizer = deltas_of(metaspace, ids, chunk)
    full = metaspace.decode(ids, skip_special_tokens=True)
    running = ""
    for i, delta in enumerate(deltas):
        running += delta
        so_far = metaspace.decode(ids[: (i + 1) * chunk], skip_special_tokens=True)
        assert full.startswith(running) and so_far.startswith(running), (
            f"after {words[: (i + 1) * chunk]} the stream says {running!r}, the decode {so_far!r}"
        )
    assert running + detokenizer.finish() == full
