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


@cache
def byte_level_table() -> dict[str, int]:
    """GPT-2's printable stand-in character for each byte, inverted: character -> byte.

    Printable bytes stand for themselves; the others (space, control bytes,
    0x7F-0xA0, 0xAD) are shifted to the characters from U+0100 up, in order.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = [b for b in range(256) if b not in printable]
    table = {chr(b): b for b in printable}
    table.update({chr(256 + i): b for i, b in enumerate(shifted)})
    return table


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


def token_bytes(tokenizer, token_id: int) -> bytes:
    """The bytes that token `token_id` stands for (special and added tokens: their content)."""
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
