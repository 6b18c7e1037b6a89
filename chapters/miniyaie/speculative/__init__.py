"""Chapter 9: speculative decoding — cheap drafts (the n-gram proposer) and the rule that keeps the target's distribution."""

from miniyaie.speculative.acceptance import accept_greedy, accept_sampled
from miniyaie.speculative.ngram import NgramProposer

__all__ = ["NgramProposer", "accept_greedy", "accept_sampled"]
