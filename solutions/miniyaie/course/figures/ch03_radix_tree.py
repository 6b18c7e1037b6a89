"""Chapter 3: a radix split and an LRU eviction, drawn from the real RadixCache (miniyaie.radix).

Blocks of one token, so that every edge reads as words: cache two
sequences, insert a third that leaves the first one's edge partway (the
edge splits), then let a running request lock that third sequence and ask
the tree to free blocks: the least recently used unlocked leaf goes.
"""

from __future__ import annotations

NAME = "ch03_radix_tree"
PAGE = "ch03_radix_tree.md"
WORDS = ["the", "cat", "sat", "down", "a", "dog", "ran"]


def data() -> dict:
    from miniyaie.paged import BlockAllocator
    from miniyaie.radix.tree import RadixCache

    allocator = BlockAllocator(16)
    tree = RadixCache(allocator, block_size=1)

    def cache(words):  # a request that computed `words` caches them and finishes: the tree keeps the blocks
        tokens = [WORDS.index(w) for w in words]
        blocks = allocator.allocate_many(len(tokens))
        node = tree.insert(tokens, blocks)
        for block in blocks:
            allocator.free(block)
        return node

    def snapshot(node):
        return {"words": [WORDS[t] for t in node.key], "blocks": list(node.blocks), "lock": node.lock_ref,
                "time": None if node is tree.root else node.last_access,
                "children": [snapshot(c) for c in sorted(node.children.values(), key=lambda c: c.key)]}

    cache(["the", "cat", "sat", "down"])
    cache(["a", "dog"])
    first = snapshot(tree.root)
    running = cache(["the", "cat", "ran"])
    split = snapshot(tree.root)
    tree.match_prefix([WORDS.index(w) for w in ["a", "dog"]])  # a request reads "a dog": it is used recently
    tree.lock(running)  # a running request holds "the cat ran"
    locked = snapshot(tree.root)
    freed = tree.evict(1)
    tree.check_integrity()
    after = snapshot(tree.root)
    snapshots = (first, split, locked, after)
    times = sorted({n["time"] for s in snapshots for n in _walk(s) if n["time"] is not None})
    for n in (n for s in snapshots for n in _walk(s) if n["time"] is not None):
        n["time"] = times.index(n["time"])  # the clock is process-wide: keep only the order of uses
    return {"panels": [["1. Two sequences cached", first, []],
                       ["2. Insert 'the cat ran':\nthe edge splits after 'the cat'", split, []],
                       [f"3. 'the cat ran' locked; evict(1):\nLRU unlocked leaf freed ({freed} blocks)", locked,
                        _gone(locked, after)]],
            "free_blocks": allocator.num_free}


def _walk(node):
    yield node
    for child in node["children"]:
        yield from _walk(child)


def _gone(before, after) -> list[list[str]]:
    """Paths (words from the root) of the nodes in `before` but not in `after`."""
    def paths(node, prefix=()):
        here = prefix + tuple(node["words"])
        yield here
        for child in node["children"]:
            yield from paths(child, here)
    return [list(p) for p in sorted(set(paths(before)) - set(paths(after)))]


def draw(data: dict):
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from miniyaie.course.figures import style

    fig, axes = style.figure(5.0, ncols=3)
    for ax, (title, root, gone) in zip(axes, data["panels"]):
        leaves = []
        _layout(root, 0, leaves)
        width = max(len(leaves), 2)
        style.blank(ax, (-0.6, width - 0.4), (-3.15, 0.45))
        ax.set_title(title, fontsize=11)
        _draw(ax, style, root, (), gone, None)
    handles = [Patch(facecolor=style.SKY, edgecolor="#333333", label="node (edge tokens, its blocks)"),
               Patch(facecolor=style.ORANGE, edgecolor="#333333", label="locked by a running request"),
               Patch(facecolor="white", edgecolor=style.VERMILION, linestyle="--", label="evicted: blocks freed"),
               Line2D([], [], color="none", label="t = order of last use (0 = oldest)")]
    fig.legend(handles=handles, loc="lower center", ncols=2, fontsize=10.5, frameon=False)
    fig.suptitle("Radix tree: a split keeps both sequences; eviction takes the least recently used unlocked leaf")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def _layout(node, depth, leaves):
    node["y"] = -1.3 * depth
    if not node["children"]:
        node["x"] = len(leaves)
        leaves.append(node)
        return
    for child in node["children"]:
        _layout(child, depth + 1, leaves)
    node["x"] = sum(c["x"] for c in node["children"]) / len(node["children"])


def _draw(ax, style, node, prefix, gone, parent):
    path = prefix + tuple(node["words"])
    evicted = list(path) in gone
    if parent is not None:
        ax.plot([parent["x"], node["x"]], [parent["y"] - (0.25 if parent["words"] == [] else 0.4), node["y"] + 0.4], color="#555555", linewidth=1,
                linestyle="--" if evicted else "-")
    if not node["words"]:
        style.box(ax, node["x"] - 0.3, node["y"] - 0.25, 0.6, 0.5, "root", colour="white", fontsize=10.5)
    else:
        colour = "white" if evicted else style.ORANGE if node["lock"] else style.SKY
        words = node["words"]
        label = "\n".join(" ".join(words[i:i + 2]) for i in range(0, len(words), 2))  # two words a line
        blocks = ",".join(map(str, node["blocks"]))
        text = f"{label}\nblocks {blocks}\nt={node['time']}" + (f" lock={node['lock']}" if node["lock"] else "")
        patch = style.box(ax, node["x"] - 0.46, node["y"] - 0.4, 0.92, 0.8, text, colour=colour, fontsize=10,
                          edge=style.VERMILION if evicted else "#333333")
        if evicted:
            patch.set_linestyle("--")
    for child in node["children"]:
        _draw(ax, style, child, path, gone, node)
