"""The acceptance rule: which drafts to keep so that the output is the target model's own (Task 9.2).

The target model scores the k drafted positions and one more in a single
forward: row i of its output is what it would do after the prompt and the
first i drafts. The rule turns those k + 1 rows into the tokens the request
keeps: a prefix of the drafts and then one token of the target's own. Under
greedy decoding that token is the target's argmax; under sampling the rule
must make every kept token distributed exactly as if the target had
sampled it alone, whatever the drafts were and however they were proposed.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


# ANCHOR: accept_greedy
def accept_greedy(draft: Sequence[int], target: Sequence[int]) -> list[int]:
    """The tokens greedy decoding keeps: the drafts the target agrees with, then the target's own next token.

    draft: the k proposed tokens. target: k + 1 tokens, target[i] the target's greedy choice after the
    prefix and draft[:i] (so target[k] follows the last draft). Returns the longest prefix of draft
    that equals target there, followed by the target's token at the first position where they differ,
    or by target[k] when all k agree: always 1 to k + 1 tokens, and exactly what greedy decoding one
    token at a time would have written next. ValueError when len(target) != len(draft) + 1.

    >>> accept_greedy([4, 7, 9], [4, 7, 2, 5])   # third draft wrong: the target's 2 replaces it
    [4, 7, 2]
    >>> accept_greedy([4, 7], [4, 7, 1])         # all accepted, and the target's next token for free
    [4, 7, 1]
    >>> accept_greedy([], [3])
    [3]
    """
    # Idea: the target's row after a rejected draft was computed on a wrong prefix: what of it can you use?
    # Stuck? `miniyaie hint 9.2` prints hints, one level at a time.
    # TODO(Task 9.2): The acceptance rule. Replace this line with your code.
    raise NotImplementedError('Chapter 9, Task 2: The acceptance rule — see book/src/ch09_speculative.md')
# ANCHOR_END: accept_greedy


def _check_shapes(draft: Sequence[int], target_probs: torch.Tensor, draft_probs: torch.Tensor | None) -> None:
    k = len(draft)
    if target_probs.dim() != 2 or target_probs.shape[0] != k + 1:
        raise ValueError(f"target_probs must be [len(draft) + 1, V] = [{k + 1}, V], got {list(target_probs.shape)}")
    vocab = target_probs.shape[1]
    if draft_probs is not None and tuple(draft_probs.shape) != (k, vocab):
        raise ValueError(f"draft_probs must be [len(draft), V] = [{k}, {vocab}], got {list(draft_probs.shape)}")
    bad = [t for t in draft if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"draft tokens {bad} are outside the vocabulary of {vocab}")


# ANCHOR: accept_sampled
def accept_sampled(draft: Sequence[int], target_probs: torch.Tensor, draft_probs: torch.Tensor | None,
                   generator: torch.Generator | None = None) -> list[int]:
    """The tokens sampling keeps: each is distributed exactly as the target model's own sample there.

    draft: the k proposed tokens, draft[i] drawn from draft_probs[i] (when given). target_probs: [k + 1, V],
    row i the target's probabilities after the prefix and draft[:i], every sampling setting already
    applied (temperature, top-k, top-p: zeros allowed). draft_probs: [k, V], the proposer's, or None for a
    proposer that picks its drafts deterministically (an n-gram lookup: a point mass on each draft).
    Returns the kept drafts (a prefix of draft) followed by one token of the target's: 1 to k + 1 tokens,
    k + 1 only when every draft is kept (the last one then drawn from row k). A rejected draft is never
    the token that takes its place.
    The guarantee: over the draws of the drafts and of this rule, the first returned token is
    distributed as target_probs[0]; given that draft 0 was kept, the second as target_probs[1]; and so on.
    So a token the target gives probability zero is never returned. When each row of target_probs is
    one-hot (greedy), the result equals accept_greedy(draft, the rows' argmax).
    Randomness comes only from `generator` (the global generator when None): the same seed, the same
    result. ValueError when a shape does not fit the draft or a draft token is outside [0, V).

    >>> p = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])   # one-hot: the target is sure
    >>> accept_sampled([1], p, None), accept_sampled([0], p, None)
    ([1, 2], [1])
    """
    # Idea: after a rejection you may not simply sample the target: what has the rejection already told you?
    # Stuck? `miniyaie hint 9.2` prints hints, one level at a time.
    # TODO(Task 9.2): The acceptance rule. Replace this line with your code.
    raise NotImplementedError('Chapter 9, Task 2: The acceptance rule — see book/src/ch09_speculative.md')
# ANCHOR_END: accept_sampled
