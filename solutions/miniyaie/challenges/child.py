"""The child process of `miniyaie challenge`: scores one column with the tree its MINIYAIE_IMPL selects.

    python -m miniyaie.challenges.child N yours|reference

prints one JSON line: {"yours": x} (and "yours_note", a line about it, when the challenge explains) or {"reference": x, "baseline": y}.
"""

from __future__ import annotations

import json
import math
import sys

from miniyaie.challenges.base import challenge_for


def _num(x: float) -> float | None:
    return None if x is None or math.isnan(x) else float(x)


def main(argv: list[str]) -> int:
    number, role = int(argv[0]), argv[1]
    challenge = challenge_for(number)
    if role == "yours":
        score = challenge.run()
        out = {"yours": _num(score)}
        if challenge.explain is not None:
            out["yours_note"] = challenge.explain(score)
    else:
        out = {"reference": _num((challenge.reference or challenge.run)())}
        if challenge.baseline is not None:
            out["baseline"] = _num(challenge.baseline())
    print("CHALLENGE-SCORES " + json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
