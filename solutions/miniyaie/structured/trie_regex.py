"""A list of literal texts (enum values, guided_choice) as one regex factored like a trie.

`(apple|apricot|banana)` becomes `(ap(ple|ricot)|banana)`: the same
language, but the automaton compiler meets one small alternation per
branching point instead of one union of all the texts at once, whose every
step looks at every text (a thousand choices took seconds; factored, a
fraction of one).
"""

from __future__ import annotations

import re

_END = ""  # a trie key that marks "a text ends here" (no text has an empty character)


def alternation(texts: list[str]) -> str:
    """A regex matching exactly the given texts (at least one), factored by common prefixes."""
    trie: dict = {}
    for text in texts:
        node = trie
        for char in text:
            node = node.setdefault(char, {})
        node[_END] = {}
    body = _regex(trie)
    if _END in trie:  # the empty text is one of them
        return f"({body})?" if body else ""
    return "(" + body + ")"


def _regex(node: dict) -> str:
    """The regex of everything below node; chains without branches are written in one go (no recursion)."""
    branches = []
    for char, child in node.items():
        if char == _END:
            continue
        chain = [char]
        while len(child) == 1 and _END not in child:  # follow a path that does not branch
            (char, child), = child.items()
            chain.append(char)
        tail = _regex(child) if child.keys() - {_END} else ""
        if tail and _END in child:
            tail = f"({tail})?"
        elif tail and len(child) > 1:
            tail = f"({tail})"
        branches.append(re.escape("".join(chain)) + tail)
    return "|".join(branches)
