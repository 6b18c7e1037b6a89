"""One message for "speculation changed the output": where the first token differs, not two long lists."""

from __future__ import annotations


def first_difference(got: list, want: list, rule: str) -> str:
    """`got` and `want`: a token list, or one token list per request. Names the first request and position
    where they part (or the lengths that differ), then the rule the test checks."""
    nested = any(isinstance(tokens, list) for tokens in [*got, *want])
    if nested and len(got) != len(want):
        return f"{len(got)} outputs where {len(want)} were expected: {rule}"
    pairs = list(zip(got, want)) if nested else [(got, want)]
    for index, (mine, theirs) in enumerate(pairs):
        if mine == theirs:
            continue
        where = f"request {index}: " if len(pairs) > 1 else ""
        at = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
        token = lambda tokens: tokens[at] if at < len(tokens) else "the end"  # noqa: E731
        return (f"{where}the output parts at token {at} of {len(theirs)}: {token(mine)} where the expected output has "
                f"{token(theirs)} (both agree on the {at} before it; got {len(mine)} tokens): {rule}")
    return f"the outputs are equal: {rule}"
