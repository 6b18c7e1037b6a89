"""One measured design problem per chapter (`miniyaie challenge N`); base.py states the contract."""

from miniyaie.challenges.base import Challenge, challenge_for, chapters_with_challenges, learner_design

__all__ = ["Challenge", "challenge_for", "chapters_with_challenges", "learner_design"]
