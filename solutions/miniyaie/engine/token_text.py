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
    # Nudge: which 188 bytes can stand for themselves, and where do the other 68 go?
    # Hint 1: Byte-level BPE wants every byte to be a visible character in its vocabulary file,
    #   so it keeps the bytes that already print as themselves in Latin-1 and moves the others
    #   out of the way, to the characters just past Latin-1, keeping their order. Inverting
    #   that map (character -> byte) is what reading a token back needs.
    # Hint 2: List the bytes that stand for themselves (three ranges of ord() values, ends
    #   included; or ask chr(b).isprintable(), which counts the space in). The shifted bytes are all of range(256) not in that list, in order; the i-th of them is
    #   written chr(256 + i). Build the dict from both.
    # Hint 3:
    #   printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    #   shifted = [b for b in range(256) if b not in printable]
    #   table = {chr(b): b for b in printable} | {chr(256 + i): b for i, b in enumerate(shifted)}
    # BEGIN SOLUTION 5.7: A token's text and its bytes
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = [b for b in range(256) if b not in printable]
    table = {chr(b): b for b in printable}
    table.update({chr(256 + i): b for i, b in enumerate(shifted)})
    return table
    # END SOLUTION
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
    # Nudge: a decoder is a tree; the family is decided by what is anywhere in it.
    # Hint 1: tokenizer.json describes its decoder as nested dicts: a Sequence holds a list of
    #   steps, and a step may be a Sequence again. Gather the type of every step, however deep,
    #   then decide; ByteLevel wins over the SentencePiece markers (it changes every byte).
    # Hint 2: Walk the tree with a stack (or recursion): start from [decoder] when there is one,
    #   pop a step, record step["type"], push the steps under step.get("decoders"). Then test
    #   the recorded types in the contract's order.
    # Hint 3:
    #   steps, types = ([decoder] if decoder else []), set()
    #   while steps: step = steps.pop(); types.add(step.get("type")); steps += step.get("decoders") or []
    #   "byte_level" if "ByteLevel" in types else "sentencepiece" if types & {"ByteFallback", "Metaspace"} else "other"
    # BEGIN SOLUTION 5.7: A token's text and its bytes
    steps, types = [decoder] if decoder else [], set()
    while steps:
        step = steps.pop()
        types.add(step.get("type"))
        steps += step.get("decoders") or []
    if "ByteLevel" in types:
        return "byte_level"
    if types & {"ByteFallback", "Metaspace"}:
        return "sentencepiece"
    return "other"
    # END SOLUTION
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
    # Nudge: a symbol is a disguise for bytes; each tokenizer family has its own disguise.
    # Hint 1: A tokenizer's symbol for a token is written so that its vocabulary file stays
    #   printable text. Byte-level BPE disguises every byte as one character; SentencePiece
    #   writes a space as "▁" and a byte it has no piece for as "<0xE2>". Undo the disguise
    #   of the tokenizer's own family, and leave special tokens (they are not text pieces)
    #   alone. Decoding the token to text would not do for these two families: a token
    #   holding half a character has no text, only bytes.
    # Hint 2: Byte-level symbols go through byte_level_table() character by character;
    #   SentencePiece's byte-fallback piece "<0xNN>" (BYTE_PIECE) is that one byte and any
    #   other piece is text with "▁" read as a space.
    #   Get the symbol; b"" if None. Look up the alphabet once. Added ids: encode the
    #   symbol. Byte-level: if every character is in the table, the bytes are the table's
    #   values in order, else the symbol's UTF-8. SentencePiece: BYTE_PIECE.fullmatch gives the
    #   byte of a byte piece (int(hex, 16)); otherwise replace "▁" by " " and encode. Other:
    #   decode the id with the tokenizer and encode.
    # Hint 3:
    #   symbol = tokenizer.convert_ids_to_tokens(token_id); if symbol is None: return b""
    #   alphabet = alphabet_of(tokenizer); if token_id in alphabet.added_ids: return symbol.encode("utf-8")
    #   byte_level: table = byte_level_table(); bytes(table[c] for c in symbol) if all in table else symbol.encode()
    #   sentencepiece: m = BYTE_PIECE.fullmatch(symbol); bytes([int(m.group(1), 16)]) if m else symbol.replace("▁", " ").encode()
    #   other: tokenizer.decode([token_id], skip_special_tokens=False).encode("utf-8")
    # BEGIN SOLUTION 5.7: A token's text and its bytes
    symbol = tokenizer.convert_ids_to_tokens(token_id)
    if symbol is None:
        return b""
    alphabet = alphabet_of(tokenizer)
    if token_id in alphabet.added_ids:
        return symbol.encode("utf-8")
    if alphabet.kind == "byte_level":
        table = byte_level_table()
        if all(c in table for c in symbol):
            return bytes(table[c] for c in symbol)
        return symbol.encode("utf-8")
    if alphabet.kind == "sentencepiece":
        piece = BYTE_PIECE.fullmatch(symbol)
        if piece:
            return bytes([int(piece.group(1), 16)])
        return symbol.replace(SENTENCEPIECE_SPACE, " ").encode("utf-8")
    return tokenizer.decode([token_id], skip_special_tokens=False).encode("utf-8")  # WordPiece and others
    # END SOLUTION
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
