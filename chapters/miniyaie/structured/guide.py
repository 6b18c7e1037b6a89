"""One request's walk through its pattern: the mask for the next token, the next state, and jump-forward.

    params.regex / json_schema / choice ──compile──> ByteDFA ──> TokenIndex (cached per pattern)
    Guide(index): state ── allowed() ──> mask for the sampler
                        ── advance(token) ──> next state
                        ── forced_tokens() ──> tokens to append without a model step

Jump-forward: where the pattern allows exactly one next byte (the key and
the `":"` after it in a JSON object, a closing `"}`), the model has no
choice, so asking it is a wasted step. The engine appends those bytes as
tokens right away; they are prefilled in the next step like prompt tokens,
so the KV cache stays exactly as if the model had chosen them. Our rule
for which tokens: the longest vocabulary token that is a prefix of the
forced bytes, again and again. The model might have split the same text
differently (SGLang re-tokenizes a few characters before the boundary to
stay closer to what the model would write); the text is the same.
"""

from __future__ import annotations

from miniyaie.structured.fsm import DEAD, PatternError
from miniyaie.structured.json_schema import json_object_regex, schema_to_regex
from miniyaie.structured.limits import Limits, over
from miniyaie.structured.token_index import TokenIndex
from miniyaie.structured.trie_regex import alternation

JSON_OBJECT = "json_object"  # json_schema value for OpenAI's {"type": "json_object"}


def pattern_of(params, limits: Limits | None = None) -> str | None:
    """The regex a request's output must match in full, or None if it is unconstrained.

    PatternError if a size the request names is over `limits` (the defaults if None)."""
    limits = limits or Limits()
    if params.regex is not None:
        return params.regex
    if params.choice is not None:
        if len(params.choice) > limits.max_enum:
            raise over("guided_choice: entries", len(params.choice), limits.max_enum, "max_enum")
        if not params.choice:
            raise PatternError("guided_choice is empty: it allows no output")
        for choice in params.choice:
            if any(0xD800 <= ord(c) <= 0xDFFF for c in choice):
                raise PatternError("guided_choice: an entry holds a lone surrogate (not a character UTF-8 can write)")
        return alternation(list(params.choice))
    if params.json_schema is not None:
        if params.json_schema == JSON_OBJECT:
            return json_object_regex()
        return schema_to_regex(params.json_schema, limits=limits)
    return None


def keyword_of(params) -> str:
    """The request field a pattern came from, for the messages that refuse it."""
    return "guided_regex" if params.regex is not None else "guided_choice" if params.choice is not None else "json_schema"


class Guide:
    """Where one completion stands in its pattern."""

    def __init__(self, index: TokenIndex):
        self.index = index
        self.state = index.dfa.initial
        self._by_bytes: dict[bytes, int] | None = None

    def allowed(self):
        return self.index.mask(self.state)

    def advance(self, token_id: int) -> None:
        state = self.index.next_state(self.state, token_id)
        if state == DEAD:
            if not bool(self.allowed().any()):  # the sampler had nothing to choose from
                raise PatternError("no token of this vocabulary continues the pattern here: the output so far "
                                   "cannot be completed (the pattern needs text the vocabulary cannot write)")
            raise PatternError(f"token {token_id} does not continue the pattern (it was masked out)")
        self.state = state

    @property
    def finished(self) -> bool:
        """The pattern is matched and nothing may follow: the request is done."""
        dfa = self.index.dfa
        return bool(dfa.accepting[self.state]) and bool((dfa.next_state[self.state] == DEAD).all())

    # ANCHOR: forced_tokens
    def forced_tokens(self) -> list[int]:
        """The tokens that write what the pattern forces from here, and the guide moved over them.

        Forced text: the bytes that follow the guide's state with no choice (`ByteDFA.forced_byte`), up to
        the first state with a choice or where the pattern may end. Returns: vocabulary tokens whose bytes,
        joined, are the longest prefix of the forced text that a longest-match split can write (at each
        point the longest token that begins the rest); [] when nothing is forced or no token fits.
        Invariant: the guide stands after the returned tokens' bytes, exactly as if it had `advance`d over
        them (never after forced bytes no returned token wrote). The forced text is bytes: the tokens
        may end inside a character, the guide then between its bytes (a state like any other).
        Examples (tests): '{"name":"' with tokens '{"', 'name', '":', 'name":"' is ['{"', 'name":"'];
        'abcdab' forced with tokens 'ab', 'c' and no 'd' is ['ab', 'c'], the guide after 'abc';
        'é' (C3 A9) forced with tokens C3, 'A9 x', 'A9 y' is [C3], the guide after C3.
        """
        # Idea: what do the returned tokens write, and what does the model write next?
        # Stuck? `miniyaie hint 8.7` prints hints, one level at a time.
        # TODO(Task 8.7): Jump-forward. Replace this line with your code.
        raise NotImplementedError('Chapter 8, Task 7: Jump-forward — see book/src/ch08_structured_output.md')
    # ANCHOR_END: forced_tokens

    def _token_of_bytes(self) -> dict[bytes, int]:
        """bytes -> the lowest token id with those bytes (built once per guide)."""
        if self._by_bytes is None:
            self._by_bytes = {}
            for token_id, data in enumerate(self.index.vocabulary.token_bytes):
                if data and data not in self._by_bytes:
                    self._by_bytes[data] = token_id
        return self._by_bytes
