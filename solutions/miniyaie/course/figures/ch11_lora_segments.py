"""Chapter 11: one step's rows, several adapters and none, grouped into one segment per adapter.

Drawn from the real component: `group_rows` (miniyaie.lora) groups the step's rows; the figure shows
the step as the scheduler packed it (prefill chunks and decodes of requests with their adapter slots),
the segments it made, and the one shrink and expand each segment runs.
"""

from __future__ import annotations

NAME = "ch11_lora_segments"
PAGE = "ch11_lora.md"
# (request, adapter slot or -1, rows it has in the step): two prefill chunks and six decodes
REQUESTS = [("r0", 2, 3), ("r1", -1, 1), ("r2", 0, 1), ("r3", 2, 1), ("r4", 1, 4), ("r5", 0, 1), ("r6", -1, 1),
            ("r7", 2, 1)]


def data() -> dict:
    import torch

    from miniyaie.lora import group_rows

    slot_of_row = [slot for _, slot, rows in REQUESTS for _ in range(rows)]
    request_of_row = [name for name, _, rows in REQUESTS for _ in range(rows)]
    segments = group_rows(torch.tensor(slot_of_row))
    return {"slot_of_row": slot_of_row, "request_of_row": request_of_row, "order": segments.order.tolist(),
            "starts": segments.starts.tolist(), "lengths": segments.lengths.tolist(), "slots": segments.slots.tolist()}


def draw(data: dict):
    from matplotlib.patches import Rectangle

    from miniyaie.course.figures import style

    colours = {-1: style.GREY, 0: style.BLUE, 1: style.ORANGE, 2: style.GREEN}
    fig, ax = style.figure(4.6)
    rows = len(data["slot_of_row"])
    style.blank(ax, (-1.2, rows + 3.4), (-3.2, 3.3))
    ax.text(-1.1, 2.55, "the step's rows\n(as scheduled)", ha="left", va="center", fontsize=10)
    ax.text(-1.1, -0.05, "grouped by\nadapter slot", ha="left", va="center", fontsize=10)
    x0 = 1.6
    for i, (slot, request) in enumerate(zip(data["slot_of_row"], data["request_of_row"])):
        ax.add_patch(Rectangle((x0 + i, 2.2), 0.9, 0.7, facecolor=colours[slot], edgecolor="white"))
        ax.text(x0 + i + 0.45, 2.55, request, ha="center", va="center", fontsize=9,
                color="white" if slot >= 0 else "black")
        ax.text(x0 + i + 0.45, 3.05, str(i), ha="center", va="center", fontsize=8, color="#555555")
    gap = 0
    for segment, (start, length, slot) in enumerate(zip(data["starts"], data["lengths"], data["slots"])):
        left = x0 + start + gap
        for k in range(length):
            row = data["order"][start + k]
            ax.add_patch(Rectangle((left + k, -0.4), 0.9, 0.7, facecolor=colours[slot], edgecolor="white"))
            ax.text(left + k + 0.45, -0.05, str(row), ha="center", va="center", fontsize=9, color="white")
            style.arrow(ax, (x0 + row + 0.45, 2.15), (left + k + 0.45, 0.35), colour="#999999", style="-")
        mid = left + length / 2 - 0.05
        ax.plot([left, left + length - 0.1], [-0.55, -0.55], color=colours[slot], linewidth=2)
        ax.text(mid, -1.05, f"slot {slot}: {length} row{'s' if length > 1 else ''}", ha="center", va="center", fontsize=9.5)
        ax.text(mid, -1.6, f"x @ A{slot}ᵀ → r\n→ @ B{slot}ᵀ", ha="center", va="center", fontsize=9)
        gap += 0.6
    ax.text(x0, -2.75, "rows with no adapter (grey) are in no segment: the base projection alone.\n"
            "Each segment reads its adapter's A and B once (one shrink, one expand) and adds back to its own rows.",
            ha="left", va="center", fontsize=9.5)
    ax.set_title("A step of eight requests over three adapters: one pair of matmuls per adapter, not per row")
    fig.tight_layout()
    return fig
