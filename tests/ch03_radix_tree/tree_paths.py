"""Chapter 3's tests name a node by the tokens that lead to it, whatever edges the tree split them into."""


def spelled(node) -> tuple:
    """The tokens on the path from the root to `node`."""
    parts = []
    while node is not None:
        parts.append(tuple(node.key))
        node = node.parent
    return tuple(t for part in reversed(parts) for t in part)
