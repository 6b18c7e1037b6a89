"""Chapter 4: split-KV decode attention (flash-decoding) and its log-sum-exp merge, on numbers.

One query over 12 cached tokens in 3 splits. Each split (one program of
Task 4.1's split kernel) keeps its running max m, its sum l of exp(score - m) and its
normalised partial output o (values are one number per token here, so that
o is too); it writes o and lse = m + log l. The merge (Task 4.1's merge kernel) weights
each split by exp(lse_i - LSE), LSE = log-sum-exp of the lse_i, and gets
exactly the softmax over all 12 tokens.
"""

from __future__ import annotations

import math

NAME = "ch04_split_kv"
PAGE = "ch04_triton_kernels.md"
SCORES = [0.3, 1.1, -0.4, 0.8, 2.6, 1.9, 0.2, 2.2, -1.0, 0.5, 1.4, 0.1]  # q . k_j * scale
VALUES = [1.0, -0.5, 2.0, 0.3, 1.5, -1.2, 0.8, 2.4, -2.0, 0.6, -0.3, 1.1]  # v_j (head_dim 1)
SPLIT_LEN = 4


def data() -> dict:
    splits = []
    for start in range(0, len(SCORES), SPLIT_LEN):
        s, v = SCORES[start:start + SPLIT_LEN], VALUES[start:start + SPLIT_LEN]
        m = max(s)
        l = sum(math.exp(x - m) for x in s)  # noqa: E741
        o = sum(math.exp(x - m) * y for x, y in zip(s, v)) / l
        splits.append({"start": start, "m": m, "l": l, "lse": m + math.log(l), "o": o})
    big = max(sp["lse"] for sp in splits)
    lse = big + math.log(sum(math.exp(sp["lse"] - big) for sp in splits))
    for sp in splits:
        sp["w"] = math.exp(sp["lse"] - lse)
    merged = sum(sp["w"] * sp["o"] for sp in splits)
    top = max(SCORES)
    exact = sum(math.exp(x - top) * y for x, y in zip(SCORES, VALUES)) / sum(math.exp(x - top) for x in SCORES)
    r = lambda x: round(x, 4)  # noqa: E731  (stable across machines' last bits)
    return {"scores": SCORES, "split_len": SPLIT_LEN,
            "splits": [{k: (r(x) if isinstance(x, float) else x) for k, x in sp.items()} for sp in splits],
            "lse": r(lse), "merged": r(merged), "exact": r(exact)}


def draw(data: dict):
    from miniyaie.course.figures import style

    colours = [style.BLUE, style.ORANGE, style.GREEN]
    fig, (left, right) = style.figure(4.6, ncols=2, gridspec_kw={"width_ratios": [2.3, 1]})
    n, size = len(data["scores"]), data["split_len"]
    for i, sp in enumerate(data["splits"]):
        xs = list(range(sp["start"], sp["start"] + size))
        left.bar(xs, data["scores"][sp["start"]:sp["start"] + size], color=colours[i], width=0.8)
        left.text(sp["start"] + size / 2 - 0.5, 3.05, f"split {i}: one program", ha="center", fontsize=9.5,
                  color=colours[i], weight="bold")
        left.hlines(sp["m"], xs[0] - 0.4, xs[-1] + 0.4, color="black", linestyle=":", linewidth=1.2)
        left.text(sp["start"] + size / 2 - 0.5, -1.55, f"m = {sp['m']:.2f}\nl = {sp['l']:.3f}\nlse = {sp['lse']:.3f}\n"
                  f"o = {sp['o']:.3f}", ha="center", va="top", fontsize=9.5,
                  bbox={"facecolor": "white", "edgecolor": colours[i]})
    left.axhline(0, color="#555555", linewidth=0.8)
    left.set_xticks(range(n))
    left.set_xlim(-0.6, n - 0.4)
    left.set_ylim(-3.9, 3.5)
    left.set_xlabel("cached token position j")
    left.set_ylabel("score q·k_j (scaled)")
    left.set_title("Each split: max m (dotted), sum l = Σ exp(s − m), partial o", fontsize=11)
    ws = [sp["w"] for sp in data["splits"]]
    right.bar(range(len(ws)), ws, color=colours, width=0.6)
    for i, w in enumerate(ws):
        right.text(i, w + 0.02, f"{w:.3f}", ha="center", fontsize=9.5)
    right.set_xticks(range(len(ws)), [f"split {i}" for i in range(len(ws))])
    right.set_ylim(0, 1.0)
    right.set_ylabel("merge weight exp(lse_i − LSE)")
    right.set_title("Merge: LSE = log Σ exp(lse_i)", fontsize=11)
    right.text(0.5, 0.93, f"LSE = {data['lse']:.3f}\no = Σ w_i o_i = {data['merged']:.4f}\n"
               f"softmax over all {n}: {data['exact']:.4f}", transform=right.transAxes, ha="center", va="top",
               fontsize=9.5, bbox={"facecolor": style.LIGHT, "edgecolor": style.GREY})
    fig.suptitle("Split-KV decode attention: partial results per split, merged exactly by log-sum-exp")
    fig.tight_layout()
    return fig
