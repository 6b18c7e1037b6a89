"""Chapter 0: prefill then decode over a KV cache — what each step computes and what it reads."""

from __future__ import annotations

NAME = "ch00_kv_cache"
PAGE = "ch00_model.md"
PROMPT = ["The", "capital", "of", "France", "is"]
GENERATED = ["Paris", ".", "<eos>"]


def data() -> dict:
    rows = []  # one per step: (name, positions computed, positions read from the cache, token sampled)
    known = len(PROMPT)
    rows.append(["prefill", list(range(known)), [], GENERATED[0]])
    for i, token in enumerate(GENERATED[1:], start=1):
        rows.append([f"decode {i}", [known], list(range(known)), token])
        known += 1
    return {"tokens": PROMPT + GENERATED[:-1], "prompt": len(PROMPT), "rows": rows}


def draw(data: dict):
    from matplotlib.patches import Patch, Rectangle

    from miniyaie.course.figures import style

    tokens, rows = data["tokens"], data["rows"]
    fig, ax = style.figure(4.2)
    n = len(tokens)
    style.blank(ax, (-1.9, n + 5.9), (-len(rows) - 0.2, 1.3))
    for x, token in enumerate(tokens):
        ax.text(x + 0.5, 0.55, token, ha="center", va="center", fontsize=10.5,
                weight="bold" if x < data["prompt"] else "normal", color="black" if x < data["prompt"] else style.VERMILION)
        ax.text(x + 0.5, 0.15, f"pos {x}" if x < data["prompt"] else f"pos {x}\n(sampled)", ha="center", va="center", fontsize=8.5, color="#555555")
    for r, (name, computed, read, sampled) in enumerate(rows):
        y = -r - 1
        ax.text(-0.15, y + 0.45, name, ha="right", va="center", fontsize=11, weight="bold")
        for x in range(n):
            colour, hatch = ("white", None)
            if x in computed:
                colour = style.BLUE
            elif x in read:
                colour, hatch = style.SKY, ".."
            ax.add_patch(Rectangle((x + 0.05, y + 0.05), 0.9, 0.8, facecolor=colour, edgecolor=style.GREY, hatch=hatch))
        last = max(computed)
        style.arrow(ax, (last + 0.95, y + 0.45), (n + 0.35, y + 0.45), colour=style.VERMILION)
        ax.text(n + 0.45, y + 0.45, f"samples '{sampled}'", va="center", fontsize=10.5, color=style.VERMILION)
        ax.text(n + 2.75, y + 0.45, f"{len(computed)} token{'s' if len(computed) > 1 else ''} through the model,\n"
                f"{len(read) + len(computed)} K/V rows in attention", va="center", fontsize=9.5, color="#333333")
    ax.legend(handles=[Patch(color=style.BLUE, label="computed this step: Q, K, V; its K/V written to the cache"),
                       Patch(facecolor=style.SKY, hatch="..", edgecolor=style.GREY, label="K/V read from the cache, not recomputed")],
              loc="upper center", bbox_to_anchor=(0.45, -0.02), ncols=2, fontsize=9.5, frameon=False)
    ax.set_title("Prefill computes the whole prompt once; each decode step computes one token and reads the rest")
    fig.tight_layout()
    return fig
