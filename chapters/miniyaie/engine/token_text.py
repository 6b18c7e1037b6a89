"""How one token is spelled for a client: its text and its real bytes (what OpenAI's logprobs report).

A tokenizer's own symbol for a token is not its text. Byte-level BPE
(GPT-2, SmolLM2, Llama 3, Qwen) writes every byte as a printable stand-in
character ("Ġthe" is " the", "Ã©" is the two bytes of "é"); SentencePiece
writes a space as "▁" and a byte it has no piece for as "<0xE2>". So a
token's real bytes come from its symbol through the tokenizer's own
alphabet. A token can hold part of a character (an emoji is often 3-4
tokens): its bytes are that part, and its text has U+FFFD where the
incomplete character is, as OpenAI and vLLM show it. Joining the bytes
of consecutive tokens rebuilds the characters they split.
"""

from __future__ import annotations

import json
import re
import weakref
from dataclasses import dataclass
from functools import cache

from miniyaie.engine.outputs import TokenLogprob, TopLogprob

SENTENCEPIECE_SPACE = "\u2581"  # "▁"
BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece's byte fallback pieces
_alphabets: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> Alphabet, worked out once


# ANCHOR: byte_level_table
@cache
def byte_level_table() -> dict[str, int]:
    """GPT-2's printable stand-in character for each byte (as this page's byte-level BPE paragraph
    describes it), inverted: character -> byte, 256 entries, one per byte.

    Examples the tests check: "A" -> 0x41, "é" -> 0xE9, "Ā" -> 0x00, "Ġ" -> 0x20 (space),
    "Ċ" -> 0x0A (newline); and for every character, the same byte as the `tokenizers`
    library's own ByteLevel decoder.
    """
    # Idea: which 188 bytes can stand for themselves, and where do the other 68 go?
    # Stuck? `miniyaie hint 5.7` prints hints, one level at a time.
    # TODO(Task 5.7): A token's text and its bytes. Replace this line with your code.
    raise NotImplementedError("Chapter 5, Task 7: A token's text and its bytes — see book/src/ch05_engine.md")
# ANCHOR_END: byte_level_table


@dataclass(frozen=True)
class Alphabet:
    kind: str  # "byte_level", "sentencepiece" or "other": how the tokenizer's symbols spell bytes
    added_ids: frozenset[int]  # special and added tokens: their symbol is their text


def alphabet_of(tokenizer) -> Alphabet:
    """How `tokenizer` spells bytes, read once from its decoder (kept per tokenizer)."""
    try:
        return _alphabets[tokenizer]
    except KeyError:
        pass
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = json.loads(backend.to_str()).get("decoder") if backend is not None else None
    kind = decoder_kind(decoder)
    if kind == "other" and hasattr(tokenizer, "sp_model"):  # a slow SentencePiece tokenizer has no decoder JSON
        kind = "sentencepiece"
    alphabet = Alphabet(kind, frozenset(getattr(tokenizer, "added_tokens_decoder", {})))
    _alphabets[tokenizer] = alphabet
    return alphabet


# ANCHOR: decoder_kind
def decoder_kind(decoder: dict | None) -> str:
    """The family of a tokenizer's decoder, from its description in tokenizer.json ("decoder").

    A decoder is a dict whose "type" names it; a decoder of type "Sequence" runs the list
    of decoders under its "decoders", each of which may be a Sequence again, to any depth.
    The family: "byte_level" when any step, at any depth, is a "ByteLevel" decoder; else
    "sentencepiece" when any step is "ByteFallback" or "Metaspace"; else "other" (also for
    None, a tokenizer with no decoder).
    """
    # Idea: a decoder is a tree; the family is decided by what is anywhere in it.
    # Stuck? `miniyaie hint 5.7` prints hints, one level at a time.
    # TODO(Task 5.7): A token's text and its bytes. Replace this line with your code.
    raise NotImplementedError("Chapter 5, Task 7: A token's text and its bytes — see book/src/ch05_engine.md")
# ANCHOR_END: decoder_kind


# ANCHOR: token_bytes
def token_bytes(tokenizer, token_id: int) -> bytes:
    """The bytes that token `token_id` stands for, read back from its symbol (convert_ids_to_tokens).

    For byte-level and SentencePiece tokenizers (alphabet_of(tokenizer).kind), joining the bytes
    of consecutive tokens gives the UTF-8 of the text they encode, and a token holding part of a
    character is exactly that part. Besides:
    - an id with no symbol: b"";
    - a special or added token (alphabet_of(tokenizer).added_ids): its symbol's UTF-8;
    - in a byte-level vocabulary, a plain-text piece (a symbol that is no byte-level spelling):
      its own UTF-8;
    - any other tokenizer ("other"): the UTF-8 of the token decoded alone, special tokens kept.
    """
    # Idea: a symbol is a disguise for bytes; each tokenizer family has its own disguise.
    # Stuck? `miniyaie hint 5.7` prints hints, one level at a time.
    # TODO(Task 5.7): A token's text and its bytes. Replace this line with your code.
    raise NotImplementedError("Chapter 5, Task 7: A token's text and its bytes — see book/src/ch05_engine.md")
# ANCHOR_END: token_bytes


def spell(tokenizer, token_id: int) -> tuple[str, bytes]:
    """(text, bytes) of one token; the text has U+FFFD where the bytes hold an incomplete character."""
    raw = token_bytes(tokenizer, token_id)
    return raw.decode("utf-8", errors="replace"), raw


def token_logprob(tokenizer, token_id: int, logprob: float, top: list[tuple[int, float]]) -> TokenLogprob:
    """A generated token's TokenLogprob, it and its top alternatives spelled as the wire needs them."""
    text, raw = spell(tokenizer, token_id)
    return TokenLogprob(token_id, text, logprob, [top_logprob(tokenizer, t, lp) for t, lp in top], raw)


def top_logprob(tokenizer, token_id: int, logprob: float) -> TopLogprob:
    text, raw = spell(tokenizer, token_id)
    return TopLogprob(token_id, text, logprob, raw)
