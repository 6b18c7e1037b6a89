"""Task 5.7: a token's real bytes, read back from the tokenizer's own symbol for it.

Byte-level BPE (GPT-2, SmolLM2, Llama 3, Qwen) spells " the" as "Ġthe";
SentencePiece spells it "▁the" and a byte it has no piece for "<0xE2>". A
token that holds part of a character has that part as its bytes and U+FFFD
in its text; joining the bytes of consecutive tokens rebuilds the text.
"""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from miniyaie.engine.token_text import byte_level_table, spell, token_bytes

REPLACEMENT = "\ufffd"
PRINTABLE = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]


@pytest.fixture(scope="module")
def byte_level_tokenizers(tiny_dir, smollm2_dir):
    from transformers import AutoTokenizer

    return [AutoTokenizer.from_pretrained(tiny_dir[0]), AutoTokenizer.from_pretrained(smollm2_dir)]


@pytest.mark.task("5.7")
def test_the_byte_level_table_has_one_character_per_byte_and_keeps_printable_bytes_as_themselves():
    table = byte_level_table()
    assert sorted(table.values()) == list(range(256)), "each of the 256 bytes has exactly one character"
    for byte in PRINTABLE:
        assert table.get(chr(byte)) == byte, f"byte {byte:#04x} prints as {chr(byte)!r} in Latin-1: it stands for itself"
    moved = sorted(set(range(256)) - set(PRINTABLE))
    assert [table.get(chr(0x100 + i)) for i in range(len(moved))] == moved, (
        "the other bytes are written U+0100, U+0101, ... in byte order (space is 'Ġ', newline 'Ċ')")


@pytest.mark.task("5.7")
@settings(max_examples=80, deadline=None)
@given(st.characters(codec="utf-8"))
@example("é")  # two bytes: 0xC3 0xA9
@example("€")  # three: 0xE2 0x82 0xAC
@example("😀")  # four: 0xF0 0x9F 0x98 0x80
@example("\x7f")
def test_the_table_agrees_with_the_tokenizers_own_byte_level_decoder(character):
    from tokenizers import decoders

    by_byte = {byte: symbol for symbol, byte in byte_level_table().items()}
    disguised = "".join(by_byte[b] for b in character.encode("utf-8"))
    assert decoders.ByteLevel().decode([disguised]) == character, (
        f"{character!r}: its bytes written through the table do not decode back to it")


def spelled(tokenizer, text: str) -> list[tuple[str, bytes]]:  # (text, bytes) of each token of `text`
    return [spell(tokenizer, i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]


@pytest.mark.task("5.7")
@settings(max_examples=60, deadline=None)
@given(st.text(st.characters(exclude_categories=("Cc", "Cs", "Co", "Cn")), max_size=40))  # SmolLM2's tokenizer
@example(" the café")  # drops control and unassigned characters: these texts it keeps as they are
@example("😀 €, 北京")
@example("\n\t  two  spaces")
def test_byte_level_tokens_add_up_to_the_bytes_of_their_text(byte_level_tokenizers, text):
    for tokenizer in byte_level_tokenizers:
        pairs = spelled(tokenizer, text)
        assert b"".join(raw for _, raw in pairs) == text.encode("utf-8"), (
            f"the tokens' bytes must add up to the text; got {[raw for _, raw in pairs]} for {text!r}")
        for shown, raw in pairs:
            assert isinstance(raw, bytes) and shown == raw.decode("utf-8", errors="replace"), (shown, raw)


@pytest.mark.task("5.7")
def test_a_token_that_holds_part_of_a_character_is_that_part(byte_level_tokenizers):
    tiny = byte_level_tokenizers[0]
    pairs = spelled(tiny, "😀")  # 4 UTF-8 bytes; the tiny vocabulary has no piece for it
    assert len(pairs) > 1, "the emoji must be split for this test to mean anything"
    partial = [(t, raw) for t, raw in pairs if REPLACEMENT in t]
    assert partial, "a token with part of a character has U+FFFD in its text"
    for _, raw in partial:
        with pytest.raises(UnicodeDecodeError):
            raw.decode("utf-8")  # its bytes are the part, not the bytes of U+FFFD


@pytest.mark.task("5.7")
def test_special_tokens_are_their_content_and_a_plain_piece_in_a_byte_level_vocabulary_its_own_text():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # "<|finé|>": every character of it is in the byte table (which would read "é" as the one byte 0xE9);
    # "€" as it is: a piece no table character spells
    vocab = {"<|finé|>": 0, "Ġ": 1, "a": 2, "€": 3, "Ġa": 4}
    tokenizer = Tokenizer(models.BPE(vocab, [("Ġ", "a")]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|finé|>")
    assert token_bytes(fast, 0) == "<|finé|>".encode(), (
        "a special token is its content in UTF-8, not read through the byte table (which reads 'é' as one byte)")
    assert token_bytes(fast, 3) == "€".encode(), "a symbol with a character outside the byte table is its own UTF-8"
    assert token_bytes(fast, 4) == b" a"
    assert token_bytes(fast, 99) == b"", "an id with no symbol has no bytes"


@pytest.fixture(scope="module")
def sentencepiece_tokenizer():
    """A Llama-2-style tokenizer: "▁" for spaces, byte fallback pieces <0x00>..<0xFF>, a few merged pieces."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    pieces = ["▁", "t", "h", "e", "c", "a", "f", "é", "▁t", "▁th", "▁the", "▁c", "▁ca", "▁caf", "▁café", "<0x41>▁b"]
    vocab = {p: i for i, p in enumerate(["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *pieces])}
    merges = [("▁", "t"), ("▁t", "h"), ("▁th", "e"), ("▁", "c"), ("▁c", "a"), ("▁ca", "f"), ("▁caf", "é")]
    tokenizer = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                           decoders.Strip(" ", 1, 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


@pytest.mark.task("5.7")
def test_sentencepiece_spaces_and_byte_pieces(sentencepiece_tokenizer):
    tokenizer = sentencepiece_tokenizer
    text = "the café €"  # "€" has no piece: three byte-fallback pieces <0xE2> <0x82> <0xAC>
    pairs = spelled(tokenizer, text)
    assert b"".join(raw for _, raw in pairs) == (" " + text).encode("utf-8"), "▁ is a space (Prepend adds the first)"
    assert pairs[0] == (" the", b" the") and pairs[1] == (" café", " café".encode())
    assert [raw for _, raw in pairs[-3:]] == [b"\xe2", b"\x82", b"\xac"], "a byte piece <0xNN> is that one byte"
    assert all(t == REPLACEMENT for t, _ in pairs[-3:])
    assert spell(tokenizer, tokenizer.eos_token_id) == ("</s>", b"</s>"), "a special token is spelled as its content"
    assert token_bytes(tokenizer, vocab_id(tokenizer, "<0x41>")) == b"A"
    assert token_bytes(tokenizer, vocab_id(tokenizer, "<0x41>▁b")) == b"<0x41> b", (
        "only a piece that is exactly <0xNN> is a byte; a longer piece that starts like one is text")
    assert token_bytes(tokenizer, vocab_id(tokenizer, "<s>")) == b"<s>"


def vocab_id(tokenizer, piece: str) -> int:
    return tokenizer.get_vocab()[piece]


@pytest.mark.task("5.7")
def test_any_other_tokenizer_spells_a_token_as_its_decoded_text():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordPiece({"[UNK]": 0, "play": 1, "##ing": 2, "naïve": 3}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.decoder = decoders.WordPiece()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]")
    for token_id in (1, 2, 3):
        assert token_bytes(fast, token_id) == fast.decode([token_id], skip_special_tokens=False).encode("utf-8")


def nested(*steps, depth: int) -> dict:
    """`steps` inside `depth` Sequence decoders, with a harmless step beside them at each level."""
    decoder = {"type": "Sequence", "decoders": [{"type": "Strip", "content": " ", "start": 1, "stop": 0}, *steps]}
    for _ in range(depth):
        decoder = {"type": "Sequence", "decoders": [{"type": "Fuse"}, decoder]}
    return decoder


@pytest.mark.task("5.7")
@settings(max_examples=40, deadline=None)
@given(depth=st.integers(0, 4), marker=st.sampled_from(["ByteFallback", "Metaspace"]))
@example(depth=0, marker="Metaspace")
def test_the_decoders_family_is_found_at_any_depth(depth, marker):
    from miniyaie.engine.token_text import decoder_kind

    assert decoder_kind(nested({"type": "ByteLevel"}, depth=depth)) == "byte_level", f"a ByteLevel step {depth} Sequences deep"
    assert decoder_kind(nested({"type": marker}, depth=depth)) == "sentencepiece", f"a {marker} step {depth} Sequences deep"
    assert decoder_kind(nested({"type": marker}, {"type": "ByteLevel"}, depth=depth)) == "byte_level", (
        "ByteLevel wins over the SentencePiece markers")
    assert decoder_kind(nested({"type": "WordPiece", "prefix": "##"}, depth=depth)) == "other"
    assert decoder_kind(None) == "other", "a tokenizer with no decoder"


@pytest.mark.task("5.7")
def test_a_metaspace_tokenizer_without_byte_fallback_reads_its_spaces():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel({"<unk>": 0, "▁hello": 1, "▁world": 2}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>")
    assert [token_bytes(fast, i) for i in (1, 2)] == [b" hello", b" world"], "a Metaspace tokenizer's '▁' is a space"
