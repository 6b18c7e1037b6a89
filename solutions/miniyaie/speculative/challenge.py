"""The reference's entry to chapter 9's challenge (`miniyaie challenge 9`): read it once you have a score of your own.

It stays in solutions/: `course sync` does not copy a chapter package's
challenge.py into chapters/. The reference's entry is its chapter code
itself: the reference column scores the reference tree, whose
`NgramProposer` (speculative/ngram.py) the harness replays; this file says
what that code chose and where the room is.

The reference takes the longest suffix that recurs (up to 3 tokens) and,
among its occurrences, the most recent: right when a model repeats what it
wrote last, as in a loop. An edited file is copied from the prompt, and a
file repeats its short n-grams (`self.items`, `count <= 0`, `f"...{name}`)
in many places, so the most recent place is often a line of the answer
already written, not the one being copied now. Taking the oldest occurrence
instead scored 3.935 on this trace; choosing the occurrence whose match runs
furthest back (compared up to 32 tokens, not 3) scored 4.55, but that breaks
the work bound of the contract (at most max_n comparisons per position).
Getting most of that gain inside the bound is the problem.
"""
