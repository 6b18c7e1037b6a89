"""Chapter 9: one verification step, from the drafts to the rewind.

Drawn from the real components: the n-gram proposer finds the drafts in the
sequence itself, `accept_greedy` decides what stays against fixed target
tokens (what a model would have chosen at each position), and a
`PagedMemory` with blocks of 4 slots allocates the drafts' slots and gives
back, through `truncate`, the blocks that only rejected drafts used.
"""

from __future__ import annotations

NAME = "ch09_verify_step"
PAGE = "ch09_speculative.md"
BLOCK_SIZE = 4
K = 5
# "the cat sat on the mat . the cat" as token ids; the target would go on "sat on a rug"
WORDS = {1: "the", 2: "cat", 3: "sat", 4: "on", 5: "mat", 6: ".", 7: "a", 8: "rug"}
SEQUENCE = [1, 2, 3, 4, 1, 5, 6, 1, 2]
TARGET = [3, 4, 7, 8, 6, 1]  # the target's token after the pending token and after each draft


def data() -> dict:
    from miniyaie.paged import PagedMemory
    from miniyaie.scheduler import Request
    from miniyaie.speculative import NgramProposer, accept_greedy

    drafts = NgramProposer(1, 3).propose(SEQUENCE, K)
    kept = len(accept_greedy(drafts, TARGET[: len(drafts) + 1])) - 1
    request = Request("r", SEQUENCE[:-1], max_tokens=32, output_token_ids=[SEQUENCE[-1]])
    request.num_computed_tokens = len(SEQUENCE) - 1  # the last token was sampled, not computed yet
    memory = PagedMemory(8, BLOCK_SIZE)
    memory.allocate(request, 0)
    before = memory.block_table("r")
    memory.allocate(request, 1 + len(drafts))  # the pending token and every draft
    during = memory.block_table("r")
    memory.truncate(request, len(SEQUENCE) + kept)  # keep what was computed and accepted
    after = memory.block_table("r")
    return {"words": {str(k): v for k, v in WORDS.items()}, "sequence": SEQUENCE, "drafts": drafts,
            "target": TARGET[: len(drafts) + 1], "kept": kept, "block_size": BLOCK_SIZE,
            "tables": {"before": before, "during": during, "after": after}}


def draw(data: dict):
    from matplotlib.patches import Patch, Rectangle

    from miniyaie.course.figures import style

    words, seq, drafts, kept = data["words"], data["sequence"], data["drafts"], data["kept"]
    size, tables = data["block_size"], data["tables"]
    fig, ax = style.figure(3.0)
    n = len(seq) + len(drafts)
    style.blank(ax, (-1.6, n + 1.2), (-1.1, 2.3))
    ax.set_title(f"One verification step: {len(drafts)} drafts, {kept} accepted, then the target's own token")
    colour_of = lambda i: (style.GREY if i < len(seq) - 1 else style.BLUE if i == len(seq) - 1  # noqa: E731
                           else style.GREEN if i - len(seq) < kept else style.VERMILION)
    for i in range(n):
        token = seq[i] if i < len(seq) else drafts[i - len(seq)]
        rejected = i >= len(seq) + kept
        ax.add_patch(Rectangle((i, 0.6), 0.95, 0.8, facecolor=colour_of(i), edgecolor="white",
                               hatch="//" if rejected else None, alpha=0.85))
        ax.text(i + 0.47, 1.0, words[str(token)], ha="center", va="center", fontsize=10, color="black")
        ax.text(i + 0.47, 0.35, str(i), ha="center", va="center", fontsize=8, color="#555555")
    for j, token in enumerate(data["target"]):  # the target's token for each position after the pending one
        i = len(seq) + j
        ax.text(i + 0.47, 1.85, words[str(token)], ha="center", va="center", fontsize=10,
                color=style.BLUE if j == kept else ("#333333" if j < kept else "#999999"),
                fontweight="bold" if j == kept else None)
    ax.text(-0.2, 1.85, "target chose:", ha="right", va="center", fontsize=10)
    ax.text(-0.2, 1.0, "tokens:", ha="right", va="center", fontsize=10)
    for k, block in enumerate(tables["during"]):  # the block table, block by block
        given_back = k >= len(tables["after"])
        ax.add_patch(Rectangle((k * size, -0.75), size - 0.05, 0.5, facecolor="white",
                               edgecolor=style.VERMILION if given_back else "#333333", linewidth=1.3,
                               linestyle="--" if given_back else "-"))
        label = f"block {block}" + (" (given back)" if given_back else "")
        ax.text(k * size + size / 2, -0.5, label, ha="center", va="center", fontsize=9.5)
    ax.text(-0.2, -0.5, "block table:", ha="right", va="center", fontsize=10)
    ax.legend(handles=[Patch(color=style.GREY, label="computed"), Patch(color=style.BLUE, label="pending (sampled last step)"),
                       Patch(color=style.GREEN, label="draft accepted"),
                       Patch(facecolor=style.VERMILION, hatch="//", label="draft rejected (rewound)")],
              loc="lower center", ncol=4, bbox_to_anchor=(0.5, -0.22), frameon=False)
    return fig
