"""Logprobs name tokens by their text and real bytes, as OpenAI and vLLM do, not by the tokenizer's symbols.

Byte-level BPE spells " the" as "Ġthe"; SentencePiece spells it "▁the" and
a byte it has no piece for "<0xE2>". A token that holds part of a character
has that part as its bytes and U+FFFD in its text; joining the bytes of
consecutive tokens rebuilds the character.
"""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from server_helpers import MODEL

from miniyaie.engine.token_text import spell

pytestmark = pytest.mark.ungraded
REPLACEMENT = "\ufffd"


def spelled(tokenizer, text: str, **kwargs) -> list[tuple[str, bytes]]:
    return [spell(tokenizer, i) for i in tokenizer(text, add_special_tokens=False, **kwargs)["input_ids"]]


def check_each_token(pairs: list[tuple[str, bytes]]) -> None:
    for text, raw in pairs:
        assert isinstance(raw, bytes) and text == raw.decode("utf-8", errors="replace"), (text, raw)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=40))
@example(" the café")
@example("😀 €, 北京")
@example("\n\t  two  spaces")
def test_byte_level_tokens_spell_their_real_bytes(tiny_loaded, text):
    pairs = spelled(tiny_loaded.tokenizer, text)
    assert b"".join(raw for _, raw in pairs) == text.encode("utf-8"), "the tokens' bytes must add up to the text"
    check_each_token(pairs)
    assert not any("Ġ" in t or "Ċ" in t for t, _ in pairs if "Ġ" not in text and "Ċ" not in text), "a raw BPE symbol"


def test_a_token_that_holds_part_of_a_character(tiny_loaded):
    pairs = spelled(tiny_loaded.tokenizer, "😀")  # 4 UTF-8 bytes; the tiny vocabulary has no piece for it
    assert len(pairs) > 1, "the emoji must be split for this test to mean anything"
    partial = [(t, raw) for t, raw in pairs if REPLACEMENT in t]
    assert partial, "a token with part of a character has U+FFFD in its text"
    for text, raw in partial:
        with pytest.raises(UnicodeDecodeError):
            raw.decode("utf-8")  # its bytes are the part, not the bytes of U+FFFD
        assert raw != REPLACEMENT.encode("utf-8")


@pytest.fixture(scope="module")
def sentencepiece_tokenizer():
    """A Llama-2-style tokenizer: "▁" for spaces, byte fallback pieces <0x00>..<0xFF>, a few merged pieces."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    pieces = ["▁", "t", "h", "e", "c", "a", "f", "é", "▁t", "▁th", "▁the", "▁c", "▁ca", "▁caf", "▁café"]
    vocab = {p: i for i, p in enumerate(["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *pieces])}
    merges = [("▁", "t"), ("▁t", "h"), ("▁th", "e"), ("▁", "c"), ("▁c", "a"), ("▁ca", "f"), ("▁caf", "é")]
    tokenizer = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                           decoders.Strip(" ", 1, 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def test_sentencepiece_spaces_and_byte_pieces(sentencepiece_tokenizer):
    tokenizer = sentencepiece_tokenizer
    text = "the café €"  # "€" has no piece: three byte-fallback pieces <0xE2> <0x82> <0xAC>
    pairs = spelled(tokenizer, text)
    assert b"".join(raw for _, raw in pairs) == (" " + text).encode("utf-8"), "▁ is a space (Prepend adds the first)"
    check_each_token(pairs)
    assert pairs[0] == (" the", b" the") and pairs[1] == (" café", " café".encode())
    assert [raw for _, raw in pairs[-3:]] == [b"\xe2", b"\x82", b"\xac"]
    assert all(t == REPLACEMENT for t, _ in pairs[-3:])
    eos = tokenizer.eos_token_id
    assert spell(tokenizer, eos) == ("</s>", b"</s>"), "a special token is spelled as its content"


def test_engine_logprobs_carry_each_tokens_text_and_bytes(served):
    engine, _ = served
    tokenizer = engine.tokenizer
    result = engine.generate("Once upon a time", max_tokens=24, ignore_eos=True, logprobs=3)
    entries = result.logprobs
    assert [e.token_id for e in entries] == result.token_ids
    joined = b"".join(e.bytes for e in entries)
    assert joined.decode("utf-8", errors="replace") == tokenizer.decode(result.token_ids, skip_special_tokens=False)
    for entry in entries:
        assert entry.token == entry.bytes.decode("utf-8", errors="replace")
        assert len(entry.top_logprobs) == 3 and entry.top_logprobs[0].token_id == entry.token_id  # greedy
        assert (entry.top_logprobs[0].token, entry.top_logprobs[0].bytes) == (entry.token, entry.bytes)
        for top in entry.top_logprobs:
            assert top.token == top.bytes.decode("utf-8", errors="replace")


def test_chat_logprobs_on_the_wire_are_text_and_real_bytes(served, client):
    engine, _ = served
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hello engine"}],
                                           max_tokens=16, temperature=0, logprobs=True, top_logprobs=2,
                                           extra_body={"ignore_eos": True})
    content = reply.choices[0].logprobs.content
    assert len(content) == 16
    specials = set(engine.tokenizer.all_special_tokens)
    shown = b"".join(bytes(e.bytes) for e in content if e.token not in specials)
    assert shown.decode("utf-8", errors="replace") == reply.choices[0].message.content, (
        "the bytes of the tokens, joined, are the answer's text")
    for entry in content:
        assert entry.token == bytes(entry.bytes).decode("utf-8", errors="replace")
        assert entry.top_logprobs[0].token == entry.token and entry.top_logprobs[0].bytes == entry.bytes  # greedy
        for top in entry.top_logprobs:
            assert top.token == bytes(top.bytes).decode("utf-8", errors="replace")
