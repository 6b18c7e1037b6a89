"""A list of literal texts (enum values, guided_choice) as one regex factored like a trie (Task 8.4).

`(apple|apricot|banana)` becomes `(ap(ple|ricot)|banana)`: the same
language, but the automaton compiler meets one small alternation per
branching point instead of one union of all the texts at once, whose every
step looks at every text (a thousand choices took seconds; factored, a
fraction of one).
"""

from __future__ import annotations

import re


# ANCHOR: alternation
def alternation(texts: list[str]) -> str:
    r"""A regex matching exactly the given texts (at least one; repeats allowed), and nothing else.

    Every character is taken literally (`a.b`, `[1,2]`, `(x)?`, `é`, a
    space). The result can be written next to other regexes as it is (no
    `|` outside a group); it is the empty regex when the only text is "".
    Factored: a prefix that several texts share is written once, so the
    length is at most 6 characters per distinct non-empty prefix of the
    texts, plus 3. A text of thousands of characters (a 5,000-character
    const is a legal request) must not cost a call per character on the
    stack. Example: ["apple", "apricot", "banana"] gives a regex such as
    (ap(ple|ricot)|banana); ["a", "ab"] one such as (a(b)?).
    """
    # Nudge: a text can end where another goes on; decide where that fact lives in your structure.
    # Hint 1: Build a trie: one node per distinct prefix, a child per next character, and
    #   a mark on the nodes where a text ends. The regex of a node is the alternation of
    #   its children's regexes, each its (escaped) character followed by its own node's
    #   regex; a node where a text ends and more follows makes what follows optional.
    #   Every prefix is then written once.
    # Hint 2: Insert every text into nested dicts (char -> child), with a special key
    #   (such as "") for "a text ends here". The regex of a node: for each child,
    #   re.escape(char) + the child's regex; join them with "|". Wrap a child's regex in a
    #   group when it has several branches, and in "(...)?" when a text also ends at
    #   the child. The whole: the root's regex in a group, made optional if "" is one of
    #   the texts; just "" if it is the only one. Follow chains of single children in a
    #   loop (texts of 5,000 characters must not recurse 5,000 deep).
    # Hint 3:
    #   trie = {}; for text: node = trie; for ch in text: node = node.setdefault(ch, {}); node[END] = {}
    #   def below(node):                       # the alternation of node's children
    #       branches = []
    #       for ch, child in node.items() (skip END):
    #           chain = [ch]; while child has one key and it is not END: (ch, child), = child.items(); chain.append(ch)
    #           tail = below(child) if child has keys other than END else ""
    #           if tail and END in child: tail = "(" + tail + ")?"
    #           elif tail and len(child) > 1: tail = "(" + tail + ")"
    #           branches.append(re.escape("".join(chain)) + tail)
    #       return "|".join(branches)
    #   body = below(trie)
    #   if END in trie: return "(" + body + ")?" if body else ""
    #   return "(" + body + ")"
    # BEGIN SOLUTION 8.4: The values a schema carries
    end = ""  # a trie key that marks "a text ends here" (no text has an empty character)
    trie: dict = {}
    for text in texts:
        node = trie
        for char in text:
            node = node.setdefault(char, {})
        node[end] = {}

    def below(node: dict) -> str:
        branches = []
        for char, child in node.items():
            if char == end:
                continue
            chain = [char]
            while len(child) == 1 and end not in child:  # follow a path that does not branch
                (char, child), = child.items()
                chain.append(char)
            tail = below(child) if child.keys() - {end} else ""
            if tail and end in child:
                tail = f"({tail})?"
            elif tail and len(child) > 1:
                tail = f"({tail})"
            branches.append(re.escape("".join(chain)) + tail)
        return "|".join(branches)

    body = below(trie)
    if end in trie:  # the empty text is one of them
        return f"({body})?" if body else ""
    return "(" + body + ")"
    # END SOLUTION
# ANCHOR_END: alternation
