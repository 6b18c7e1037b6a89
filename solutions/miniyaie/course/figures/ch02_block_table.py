"""Chapter 2: block tables pointing into the pool, and copy-on-write when a forked sequence writes.

Drawn from the real BlockAllocator and grow_block_table (miniyaie.paged):
which blocks a table gets, the reference counts after a fork, the block
copy_on_write hands the writer. The slot contents (which token position
each slot holds) are tracked here, as copy_blocks would move them.
"""

from __future__ import annotations

NAME = "ch02_block_table"
PAGE = "ch02_paged_kv_cache.md"
BLOCK_SIZE = 4
NUM_BLOCKS = 6


def data() -> dict:
    from miniyaie.paged import BlockAllocator, grow_block_table

    allocator = BlockAllocator(NUM_BLOCKS)
    slots: dict[int, list] = {}  # block -> [[position, who wrote it], ...] (what the pool holds)

    def write(table, start, end, who):
        for pos in range(start, end):
            slots.setdefault(table[pos // BLOCK_SIZE], []).append([pos, who])

    a, other = [], []
    grow_block_table(a, 6, BLOCK_SIZE, allocator)  # A's prompt, first 6 tokens
    write(a, 0, 6, "A")
    grow_block_table(other, 3, BLOCK_SIZE, allocator)  # another request arrives in between
    write(other, 0, 3, "other")
    grow_block_table(a, 10, BLOCK_SIZE, allocator)  # A's prompt goes on: its table is not contiguous
    write(a, 6, 10, "A")
    b = list(a)  # fork: B starts on A's blocks
    for block in b:
        allocator.share(block)

    def snapshot(title):
        return {"title": title, "tables": {"A": list(a), "B": list(b), "other": list(other)},
                "refs": [allocator.ref_count(k) for k in range(NUM_BLOCKS)],
                "slots": {str(k): [list(s) for s in v] for k, v in sorted(slots.items())}}

    before = snapshot("After the fork: B shares all of A's blocks (ref count 2)")
    index = 10 // BLOCK_SIZE  # both write position 10, into their last, shared, block
    old = b[index]
    new = allocator.copy_on_write(old)
    b[index] = new
    slots[new] = [[pos, "copy"] for pos, _ in slots[old]]  # copy_blocks: the old K/V, then B writes
    write(b, 10, 11, "B")
    in_place = allocator.copy_on_write(a[index])  # A is now the only owner: it writes in place
    assert in_place == a[index]
    write(a, 10, 11, "A")
    after = snapshot(f"B writes token 10: copy_on_write gives it block {new} (a copy of block {old}); "
                     f"A then writes in place")
    return {"block_size": BLOCK_SIZE, "num_blocks": NUM_BLOCKS, "panels": [before, after], "cow": [old, new]}


def draw(data: dict):
    from matplotlib.patches import Patch, Rectangle

    from miniyaie.course.figures import style

    colours = {"A": style.BLUE, "B": style.ORANGE, "copy": style.SKY, "other": style.GREY}
    fig, axes = style.figure(7.6, nrows=2)
    size, n = data["block_size"], data["num_blocks"]
    bw = 1.0  # block width; slots are bw / size wide
    gap = 0.25
    x_of = lambda block: block * (bw + gap)  # noqa: E731
    for ax, panel in zip(axes, data["panels"]):
        style.blank(ax, (-2.3, n * (bw + gap) + 0.2), (-2.6, 2.9))
        ax.set_title(panel["title"], fontsize=12)
        for k in range(n):
            x = x_of(k)
            for s in range(size):
                ax.add_patch(Rectangle((x + s * bw / size, 0), bw / size, 0.7, facecolor="white", edgecolor=style.GREY))
            for pos, who in panel["slots"].get(str(k), []):
                s = pos % size
                ax.add_patch(Rectangle((x + s * bw / size, 0), bw / size, 0.7, facecolor=colours[who],
                                       edgecolor="white", hatch="//" if who == "copy" else None))
                ax.text(x + (s + 0.5) * bw / size, 0.35, str(pos), ha="center", va="center", fontsize=10,
                        color="white" if who in ("A", "B") else "black")
            ax.text(x + bw / 2, 0.85, f"block {k}", ha="center", fontsize=10.5)
            refs = panel["refs"][k]
            ax.text(x + bw / 2, -0.3, f"ref {refs}" if refs else "free", ha="center", fontsize=10.5,
                    weight="bold" if refs > 1 else "normal", color=style.VERMILION if refs > 1 else "black")
        ax.text(-2.2, 0.35, "pool\n(a slot shows\nits position)", va="center", fontsize=10.5)
        for who, y, side in (("A", 2.0, 1), ("B", -1.9, -1)):
            table = panel["tables"][who]
            ax.text(-2.2, y + 0.25, f"{who}'s table", va="center", fontsize=11, color=colours[who], weight="bold")
            for j, block in enumerate(table):
                tx = j * 0.8
                style.box(ax, tx, y, 0.65, 0.5, str(block), colour="white", edge=colours[who], fontsize=11)
                start = (tx + 0.32, y if side > 0 else y + 0.5)
                end = (x_of(block) + bw / 2, 1.05 if side > 0 else -0.4)
                style.arrow(ax, start, end, colour=colours[who], rad=0.0)
    axes[0].legend(handles=[Patch(color=style.BLUE, label="written by A (before the fork: shared)"),
                            Patch(facecolor=style.SKY, hatch="//", edgecolor="white", label="copied for B"),
                            Patch(color=style.ORANGE, label="written by B"),
                            Patch(color=style.GREY, label="another request")],
                   loc="upper right", ncols=2, fontsize=10, framealpha=0.95)
    fig.suptitle(f"Block tables map positions to pool blocks of {size} tokens; a shared block is copied before a write")
    fig.tight_layout()
    return fig
