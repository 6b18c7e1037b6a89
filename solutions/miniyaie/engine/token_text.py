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
    """GPT-2's printable stand-in character for each byte, inverted: character -> byte (256 entries).

    A byte whose Latin-1 character is printable stands for itself: "!" to "~" (0x21-0x7E),
    "¡" to "¬" (0xA1-0xAC) and "®" to "ÿ" (0xAE-0xFF). Each of the other 68 bytes (space, the
    control bytes, 0x7F-0xA0 and 0xAD) is written as a character from U+0100 up, in byte
    order: byte 0 is "Ā" (U+0100), space (0x20) is "Ġ" (U+0120), newline (0x0A) is "Ċ" (U+010A).
    """
    # Nudge: printable bytes are themselves; the rest are moved, in order, past U+00FF.
    # Hint 1: Byte-level BPE wants every byte to be a visible character in its vocabulary file,
    #   so it keeps the bytes that already print as themselves in Latin-1 and moves the others
    #   out of the way, to the characters just past Latin-1, keeping their order. Inverting
    #   that map (character -> byte) is what reading a token back needs.
    # Hint 2: List the printable bytes (three ranges of ord() values, ends included). The
    #   shifted bytes are all of range(256) not in that list, in order; the i-th of them is
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
    """How `tokenizer` spells bytes, read once from its decoder."""
    try:
        return _alphabets[tokenizer]
    except KeyError:
        pass
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = json.loads(backend.to_str()).get("decoder") if backend is not None else None
    steps, types = [decoder] if decoder else [], set()
    while steps:  # a decoder may be a Sequence of decoders
        step = steps.pop()
        types.add(step.get("type"))
        steps += step.get("decoders") or []
    if "ByteLevel" in types:
        kind = "byte_level"
    elif types & {"ByteFallback", "Metaspace"} or hasattr(tokenizer, "sp_model"):
        kind = "sentencepiece"
    else:
        kind = "other"
    alphabet = Alphabet(kind, frozenset(getattr(tokenizer, "added_tokens_decoder", {})))
    _alphabets[tokenizer] = alphabet
    return alphabet


# ANCHOR: token_bytes
def token_bytes(tokenizer, token_id: int) -> bytes:
    """The bytes that token `token_id` stands for, from its symbol (tokenizer.convert_ids_to_tokens).

    - an id with no symbol: b"";
    - a special or added token (its id in alphabet_of(tokenizer).added_ids): its symbol, UTF-8;
    - byte-level BPE (alphabet kind "byte_level"): each character of the symbol is one byte,
      through byte_level_table(); a symbol with a character outside the table (a tokenizer
      that added plain-text pieces) is its own UTF-8;
    - SentencePiece ("sentencepiece"): a byte-fallback piece "<0xNN>" (two hex digits)
      is that one byte; any other piece is its UTF-8 with every "▁" read as a space;
    - any other tokenizer ("other"): tokenizer.decode([token_id], skip_special_tokens=False), UTF-8.
    For the first two families, joining the bytes of consecutive tokens gives the bytes of the
    text they encode.
    """
    # Nudge: a symbol is a disguise for bytes; each tokenizer family has its own disguise.
    # Hint 1: A tokenizer's symbol for a token is written so that its vocabulary file stays
    #   printable text. Byte-level BPE disguises every byte as one character; SentencePiece
    #   writes a space as "▁" and a byte it has no piece for as "<0xE2>". Undo the disguise
    #   of the tokenizer's own family, and leave special tokens (they are not text pieces)
    #   alone. Decoding the token to text would not do for these two families: a token
    #   holding half a character has no text, only bytes.
    # Hint 2: Get the symbol; b"" if None. Look up the alphabet once. Added ids: encode the
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
