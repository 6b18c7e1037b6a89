"""How an object's optional members grow its regex and its compile: Task 8.3's construction against the doubling one.

    python -m miniyaie.bench.lab.bench_object_regex [--members 8 16]

For n optional string properties, the regex of `object_regex` (whichever tree is selected) and of the
construction that spells each optional member "with" and "without" (correct, and 2^n): its length, and
the seconds to compile it to a byte automaton within the default limits (or the refusal). Not a test:
nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import time

from miniyaie.structured import PatternError, compile_regex, object_regex
from miniyaie.structured.json_schema import STRING_CHAR, literal
from miniyaie.structured.limits import Budget, Limits


def doubling(members: list[tuple[str, bool]]) -> str:
    def rest(i: int, written: bool) -> str:
        if i == len(members):
            return ""
        member, required = members[i]
        now = ("," if written else "") + member + rest(i + 1, True)
        return now if required else "(" + now + "|" + rest(i + 1, written) + ")"
    return r"\{" + rest(0, False) + r"\}"


def measure(regex: str) -> str:
    started = time.perf_counter()
    try:
        dfa = compile_regex(regex, Budget(Limits()))
        outcome = f"{dfa.next_state.shape[0]} byte states"
    except PatternError as exc:
        outcome = f"refused: {str(exc)[:70]}"
    return f"{time.perf_counter() - started:6.2f} s  {outcome}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, nargs="+", default=[8, 16])
    args = parser.parse_args()
    for n in args.members:
        members = [(literal(f"p{i}") + ":" + f'"{STRING_CHAR}*"', False) for i in range(n)]
        for name, build in (("object_regex", object_regex), ("doubling", doubling)):
            regex = build(members)
            print(f"{n:3d} optional  {name:13s} {len(regex):10,d} characters  {measure(regex)}", flush=True)


if __name__ == "__main__":
    main()
