"""Incremental detokenization: token ids in, finished text out, never half a character.

Decoding each new token alone is wrong twice over: a byte-level token can
hold half of a UTF-8 character (emoji and CJK often span 2-4 tokens), and
some tokenizers print a token differently after another one (a leading
space that only appears in context). So we decode a short window that
starts a few tokens back and emit what the window's text gained, once it
no longer ends in U+FFFD (the replacement for an incomplete character).
`finish()` emits what is still held back; the deltas then add up to
`tokenizer.decode` of the whole output.
"""

from __future__ import annotations

from collections.abc import Iterable

INCOMPLETE = "\ufffd"


class IncrementalDetokenizer:
    def __init__(self, tokenizer, skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.token_ids: list[int] = []
        self.prefix_offset = 0  # the window starts here: tokens already emitted, kept for context
        self.read_offset = 0  # tokens before this are emitted
        self.text = ""  # everything emitted so far

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    # ANCHOR: push
    def push(self, token_ids: Iterable[int]) -> str:
        """Add tokens; returns the new text they complete ("" while a character is unfinished).

        The deltas, joined, equal decoding all the tokens at once (once the last
        character is complete), for byte-level and SentencePiece-style tokenizers
        alike: a token's text may depend on the token before it (a leading space),
        and one character may take several tokens (partial UTF-8, shown as INCOMPLETE).
        Decoding cost stays bounded: never the whole sequence per token.
        """
        self.token_ids.extend(token_ids)
        # Idea: a token alone may lose its space or split a character: how much context is enough, and when is text final?
        # Stuck? `miniyaie hint 5.5` prints hints, one level at a time.
        # TODO(Task 5.5): Incremental detokenization. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 5: Incremental detokenization — see book/src/ch05_engine.md')
    # ANCHOR_END: push

    # ANCHOR: finish
    def finish(self) -> str:
        """The text still held back, once no more tokens will come.

        Afterwards the deltas and this, joined, equal decoding all the tokens at once (an
        unfinished character at the very end stays as U+FFFD); calling finish again returns ""
        (everything decoded has been emitted). Raises RuntimeError, naming both
        texts, if what was emitted is not the start of that decode (it never should be:
        emitted text cannot be taken back).
        """
        # Idea: at the end there is no window to wait for: the whole decode is the truth.
        # Stuck? `miniyaie hint 5.5` prints hints, one level at a time.
        # TODO(Task 5.5): Incremental detokenization. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 5: Incremental detokenization — see book/src/ch05_engine.md')
    # ANCHOR_END: finish
