"""The vocabulary as byte strings: what a constraint walks through its automaton.

A token is a byte string, not a string: byte-level BPE (GPT-2, Llama 3,
Qwen, SmolLM2) has tokens that hold half of a UTF-8 character, and only
their concatenation decodes. Tokenizers store those bytes in disguise:
byte-level BPE writes each byte as a printable character (GPT-2's
bytes_to_unicode table), SentencePiece writes a space as "▁" and a raw byte
as "<0xNN>". `Vocabulary.from_tokenizer` undoes the disguise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch


def byte_level_alphabet() -> dict[str, int]:
    """GPT-2's printable stand-in character for every byte -> the byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[chr(byte)] = byte
        else:
            chars[chr(256 + extra)] = byte
            extra += 1
    return chars


_SENTENCEPIECE_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


@dataclass
class Vocabulary:
    """token_bytes[i]: token i's bytes (None for special tokens, which a pattern never produces)."""

    token_bytes: list[bytes | None]
    eos_token_ids: tuple[int, ...]

    @classmethod
    def from_tokenizer(cls, tokenizer, eos_token_ids: Sequence[int]) -> Vocabulary:
        """The vocabulary of a Hugging Face tokenizer (byte-level BPE or SentencePiece-style)."""
        special = set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}) or {})
        size = max(len(tokenizer), max(tokenizer.get_vocab().values()) + 1)
        pieces = tokenizer.convert_ids_to_tokens(list(range(size)))
        backend = getattr(tokenizer, "backend_tokenizer", None)
        decoder = json.loads(backend.to_str()).get("decoder") if backend is not None else None
        byte_level = _uses(decoder, "ByteLevel")
        alphabet = byte_level_alphabet()
        token_bytes: list[bytes | None] = []
        for token_id, piece in enumerate(pieces):
            if piece is None or token_id in special:
                token_bytes.append(None)
            elif byte_level:
                token_bytes.append(bytes(alphabet[c] for c in piece) if all(c in alphabet for c in piece) else None)
            elif (match := _SENTENCEPIECE_BYTE.match(piece)) is not None:
                token_bytes.append(bytes([int(match.group(1), 16)]))
            else:
                token_bytes.append(piece.replace("▁", " ").encode())
        return cls(token_bytes, tuple(eos_token_ids))

    def __len__(self) -> int:
        return len(self.token_bytes)

    def byte_matrix(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(bytes [V, longest] padded with 0, lengths [V]; 0 for special tokens), int64: the walk's input."""
        lengths = torch.tensor([len(b) if b else 0 for b in self.token_bytes], dtype=torch.int64)
        matrix = torch.zeros(len(self.token_bytes), max(1, int(lengths.max())), dtype=torch.int64)
        for i, b in enumerate(self.token_bytes):
            if b:
                matrix[i, : len(b)] = torch.tensor(list(b), dtype=torch.int64)
        return matrix, lengths


def _uses(decoder: dict | None, kind: str) -> bool:
    if not decoder:
        return False
    if decoder.get("type") == kind:
        return True
    return any(_uses(d, kind) for d in decoder.get("decoders", []) or [])
