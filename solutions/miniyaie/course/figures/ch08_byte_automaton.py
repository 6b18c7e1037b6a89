"""Chapter 8: the byte automaton of a tiny pattern and the token mask of each state.

Drawn from the real compiler and token index (miniyaie.structured): the
automaton's states and byte edges as compile_regex builds them, and for a
vocabulary of a dozen tokens, TokenIndex.allowed(state) in every state.
"""

from __future__ import annotations

NAME = "ch08_byte_automaton"
PAGE = "ch08_structured_output.md"
PATTERN = "(yes|no)!?"
TOKENS = ["y", "ye", "yes", "es", "s", "n", "no", "o", "!", "no!", "yes!", "nope", None]  # None: the EOS token


def data() -> dict:
    from miniyaie.structured import DEAD, TokenIndex, Vocabulary, compile_regex

    dfa = compile_regex(PATTERN)
    eos = TOKENS.index(None)
    index = TokenIndex(dfa, Vocabulary([t.encode() if t else None for t in TOKENS], (eos,)))
    table = dfa.next_state.tolist()
    order = [dfa.initial]  # the compiler's state numbers vary between runs (set order): number them
    for s in order:  # breadth-first from the start, bytes in order, so that the figure does not
        for t in table[s]:
            if t != DEAD and t not in order:
                order.append(t)
    edges = []  # [from, to, bytes], in the new numbers
    for s in order:
        targets: dict[int, list[int]] = {}
        for byte, t in enumerate(table[s]):
            if t != DEAD:
                targets.setdefault(order.index(t), []).append(byte)
        edges += [[order.index(s), t, bs] for t, bs in sorted(targets.items())]
    return {"pattern": PATTERN, "initial": 0, "accepting": [bool(dfa.accepting[s]) for s in order],
            "edges": edges, "tokens": [t if t else "<eos>" for t in TOKENS],
            "allowed": [[bool(a) for a in index.allowed(s).tolist()[: len(TOKENS)]] for s in order]}


def _label(byte_values: list[int]) -> str:
    text = "".join(chr(b) if 32 < b < 127 else f"\\x{b:02x}" for b in byte_values)
    return text if len(text) <= 6 else f"{text[:3]}…({len(byte_values)})"


def draw(data: dict):
    from matplotlib.patches import Circle, Rectangle

    from miniyaie.course.figures import style

    fig, (graph, table) = style.figure(7.4, nrows=2, gridspec_kw={"height_ratios": [1.05, 1]})
    n = len(data["accepting"])
    depth = {data["initial"]: 0}
    frontier = [data["initial"]]
    while frontier:  # breadth-first: a state's column is its distance from the start
        nxt = []
        for s in frontier:
            for a, b, _ in data["edges"]:
                if a == s and b not in depth:
                    depth[b] = depth[s] + 1
                    nxt.append(b)
        frontier = nxt
    rows: dict[int, int] = {}
    pos = {}
    for s in sorted(depth, key=lambda s: (depth[s], s)):
        pos[s] = (depth[s] * 2.0, -rows.get(depth[s], 0) * 1.3)
        rows[depth[s]] = rows.get(depth[s], 0) + 1
    style.blank(graph, (-1.2, max(x for x, _ in pos.values()) + 1.2), (min(y for _, y in pos.values()) - 0.7, 0.9))
    graph.set_title(f"Byte automaton of the pattern {data['pattern']}  (double circle: may end here)", fontsize=11.5)
    for a, b, byte_values in data["edges"]:
        (x1, y1), (x2, y2) = pos[a], pos[b]
        dx, dy = x2 - x1, y2 - y1
        norm = (dx * dx + dy * dy) ** 0.5
        ux, uy = dx / norm, dy / norm
        style.arrow(graph, (x1 + 0.35 * ux, y1 + 0.35 * uy), (x2 - 0.35 * ux, y2 - 0.35 * uy), rad=0.0)
        graph.text((x1 + x2) / 2 - 0.12 * uy, (y1 + y2) / 2 + 0.12 * ux + 0.05, f"'{_label(byte_values)}'",
                   ha="center", va="bottom", fontsize=10, color=style.VERMILION)
    for s, (x, y) in pos.items():
        graph.add_patch(Circle((x, y), 0.33, facecolor=style.SKY, edgecolor="#333333", linewidth=1.2))
        if data["accepting"][s]:
            graph.add_patch(Circle((x, y), 0.27, facecolor="none", edgecolor="#333333", linewidth=1.2))
        graph.text(x, y, str(s), ha="center", va="center", fontsize=11, weight="bold")
    start = pos[data["initial"]]
    style.arrow(graph, (start[0] - 1.0, start[1]), (start[0] - 0.36, start[1]))
    graph.text(start[0] - 1.05, start[1] + 0.1, "start", fontsize=9.5, ha="left", va="bottom")
    tokens = data["tokens"]
    style.blank(table, (-1.6, len(tokens) + 0.2), (-n - 0.3, 1.2))
    table.set_title("Token mask per state: which tokens of a 13-token vocabulary may come next "
                    "(TokenIndex.allowed)", fontsize=11.5)
    for j, token in enumerate(tokens):
        table.text(j + 0.5, 0.2, f"'{token}'" if token != "<eos>" else token, ha="center", va="bottom", fontsize=9.5,
                   rotation=0)
    for s in range(n):
        table.text(-0.15, -s - 0.5, f"state {s}", ha="right", va="center", fontsize=10)
        for j, ok in enumerate(data["allowed"][s]):
            table.add_patch(Rectangle((j + 0.04, -s - 0.94), 0.92, 0.88, facecolor=style.GREEN if ok else "white",
                                      edgecolor=style.GREY))
            table.text(j + 0.5, -s - 0.5, "✓" if ok else "·", ha="center", va="center", fontsize=10,
                       color="white" if ok else style.GREY)
    fig.tight_layout()
    return fig
