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
        # Nudge: a token alone may lose its space or split a character: how much context is enough, and when is text final?
        # Hint 1: Decoding one token alone loses context (SentencePiece drops a word's leading
        #   space at the start of a decode) and can split a character; decoding everything each
        #   time is quadratic. So keep a window: some tokens already emitted, for context, plus
        #   the ones not emitted yet. Text is emitted only when the window's decode grew and does
        #   not end in an unfinished character.
        # Hint 2: prefix_offset..read_offset are emitted tokens kept for context; read_offset..end
        #   are new. Decode the window without and with the new tokens. If the second is not
        #   longer, or ends with INCOMPLETE, emit nothing and keep waiting. Otherwise the delta
        #   is the second text past the first's length; slide the window (the context starts at
        #   the old read_offset, read_offset moves to the end), add the delta to self.text and
        #   return it.
        # Hint 3:
        #   before = decode(ids[prefix_offset:read_offset]); after = decode(ids[prefix_offset:])
        #   if len(after) <= len(before) or after.endswith(INCOMPLETE): return ""
        #   delta = after[len(before):]
        #   prefix_offset, read_offset = read_offset, len(ids)
        #   self.text += delta; return delta
        # BEGIN SOLUTION 5.5: Incremental detokenization
        before = self._decode(self.token_ids[self.prefix_offset : self.read_offset])
        after = self._decode(self.token_ids[self.prefix_offset :])
        if len(after) <= len(before) or after.endswith(INCOMPLETE):
            return ""
        delta = after[len(before) :]
        self.prefix_offset, self.read_offset = self.read_offset, len(self.token_ids)
        self.text += delta
        return delta
        # END SOLUTION
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
        # Nudge: at the end there is no window to wait for: the whole decode is the truth.
        # Hint 1: push may hold text back (an unfinished character, or a window that did not grow);
        #   at the end nothing more will complete it, so release it: whatever the full decode has
        #   beyond what was emitted. Text already shown can never be withdrawn, so a full decode
        #   that does not start with it means a bug above; say so instead of emitting garbage.
        # Hint 2: Decode all the tokens. If that does not start with self.text, raise RuntimeError
        #   naming both. The delta is the full text past len(self.text); record the full text as
        #   emitted, move the window past every token, and return the delta.
        # Hint 3:
        #   full = decode(all token_ids); if not full.startswith(self.text): raise RuntimeError(...)
        #   delta = full[len(self.text):]; self.text = full
        #   prefix_offset = read_offset = len(token_ids); return delta
        # BEGIN SOLUTION 5.5: Incremental detokenization
        full = self._decode(self.token_ids)
        if not full.startswith(self.text):  # never expected; say so rather than emit garbage
            raise RuntimeError(f"incremental text {self.text!r} is not a prefix of the full decode {full!r}")
        delta = full[len(self.text) :]
        self.text = full
        self.prefix_offset = self.read_offset = len(self.token_ids)  # the window starts after everything emitted
        return delta
        # END SOLUTION
    # ANCHOR_END: finish
