"""Chapter 3: the radix tree — a prefix cache the engine really uses."""

from miniyaie.radix.memory import RadixMemory
from miniyaie.radix.tree import Node, PrefixMatch, RadixCache

__all__ = ["RadixMemory", "Node", "PrefixMatch", "RadixCache"]
