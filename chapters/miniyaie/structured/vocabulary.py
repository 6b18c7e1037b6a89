"""The vocabulary as byte strings: what a constraint walks through its automaton.

A token is a byte string, not a string: byte-level BPE (GPT-2, Llama 3,
Qwen, SmolLM2) has tokens that hold half of a UTF-8 character, and only
their concatenation decodes. Tokenizers store those bytes in disguise
(GPT-2's printable stand-in characters, SentencePiece's "▁" and "<0xNN>");
chapter 5's `token_text.token_bytes` (Task 5.7) undoes it, and
`Vocabulary.from_tokenizer` asks it for every id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass
class Vocabulary:
    """token_bytes[i]: token i's bytes (None for special tokens, which a pattern never produces)."""

    token_bytes: list[bytes | None]
    eos_token_ids: tuple[int, ...]
    _matrix: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def from_tokenizer(cls, tokenizer, eos_token_ids: Sequence[int]) -> Vocabulary:
        """The vocabulary of a Hugging Face tokenizer: each id's bytes as chapter 5 spells them (token_text)."""
        from miniyaie.engine.token_text import alphabet_of, token_bytes

        special = set(tokenizer.all_special_ids) | alphabet_of(tokenizer).added_ids
        size = max(len(tokenizer), max(tokenizer.get_vocab().values()) + 1)
        spelled = [None if token_id in special else token_bytes(tokenizer, token_id) for token_id in range(size)]
        return cls([data or None for data in spelled], tuple(eos_token_ids))

    def __len__(self) -> int:
        return len(self.token_bytes)

    def byte_matrix(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(bytes [V, longest] padded with 0, lengths [V]; 0 for special tokens), int64: the walk's input.

        Made once per vocabulary and shared by every pattern's index (token_bytes is not changed after)."""
        if self._matrix is None:
            lengths = torch.tensor([len(b) if b else 0 for b in self.token_bytes], dtype=torch.int64)
            longest = max(1, int(lengths.max()))
            padded = b"".join((b or b"").ljust(longest, b"\0") for b in self.token_bytes)
            matrix = torch.frombuffer(bytearray(padded), dtype=torch.uint8).view(len(self.token_bytes), longest)
            self._matrix = (matrix.to(torch.int64), lengths)
        return self._matrix
