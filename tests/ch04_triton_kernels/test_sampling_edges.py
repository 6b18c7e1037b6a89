"""Task 4.3 on rows that random logits never give: kept tokens in several tiles, vanishing probabilities, one-ulp ties,
a top-p boundary hit exactly, a top-k boundary between two tiny probabilities.

Every row is run for several uniforms, u = 0 included, and the kernel must
pick the reference's token each time. 2500 tokens span three tiles of the
CPU kernel (1024 tokens each), so the running sum must carry from tile to tile.
"""

import math

import pytest
import torch

from miniyaie.kernels import sample, sample_reference

VOCAB = 2500
UNIFORMS = [0.0, 0.2, 0.45, 0.7, 0.999999]


def spread():
    """Three likely tokens, one per tile, over a floor of unlikely ones."""
    logits = torch.zeros(VOCAB)
    logits[[5, 1500, 2400]] = 5.0
    return logits


def two_alive():
    """Only tokens 1 and 1800 have a probability above 0 in float32 (exp(-1000) underflows)."""
    logits = torch.full((VOCAB,), -1000.0)
    logits[1], logits[1800] = 0.0, 0.5
    return logits


def vanishing_first():
    """Token 0's probability (e^-23 of token 2's) disappears in the float32 sum of the two."""
    logits = torch.full((VOCAB,), -1000.0)
    logits[0], logits[2] = -23.0, 0.0
    return logits


def one_ulp_below():
    """Token 1's probability is one float32 step below token 0's (1 - 2^-24 against 1)."""
    logits = torch.full((VOCAB,), -1000.0)
    logits[0], logits[1] = 0.0, -(2.0**-24)
    return logits


def top_k_meets_top_p():
    """p = 1 and 0.9: top-k 2 keeps both, and top-p 0.6 keeps token 1 too (the mass above it, 1/1.9, is < 0.6)."""
    logits = torch.full((VOCAB,), -1000.0)
    logits[0], logits[1] = 0.0, math.log(0.9)
    return logits


def top_p_of_what_top_k_kept():
    """p = 1, 0.9, and 0.8 for 98 more: top-k 2 keeps tokens 0 and 1, and top-p 0.5 of their mass (0.95) keeps token 0
    alone (the mass above token 1 is 1); against the whole row's mass (80.3) token 1 would stay."""
    logits = torch.full((VOCAB,), -1000.0)
    logits[0], logits[1], logits[2:100] = 0.0, math.log(0.9), math.log(0.8)
    return logits


def mass_above_equals_the_share():
    """p = 1 and 1/16 (exact in float32 whatever exp's last bit): the kept mass is 1.0625, and top-p 16/17 of it is
    exactly 1, the mass above token 1. Kept means strictly below, so token 1 goes (with <= it would stay)."""
    logits = torch.full((VOCAB,), -1000.0)
    logits[0], logits[1] = 0.0, math.log(1 / 16)
    return logits


def tiny_neighbours():
    """Tokens 0 and 1 have p near 4e-18, token 1's larger by 2e-5 of it (about 8e-23, far below 2^-64), token 2 has
    p = 1. Top-k 2 keeps tokens 1 and 2 but not 0: a search over the values of p that stops after a fixed number of
    halvings (30, or 64) cannot tell 0 from 1. With u = 0 the draw picks the first kept token, which shows it."""
    logits = torch.full((VOCAB,), -1000.0)
    logits[0], logits[1], logits[2] = -40.00002, -40.0, 0.0
    return logits


# (what the row checks, logits, temperature, top_k, top_p, min_p)
ROWS = [
    ("no filter: the running sum carries across tiles", spread(), 1.0, 0, 1.0, 0.0),
    ("top-k 3 across tiles", spread(), 1.0, 3, 1.0, 0.0),
    ("top-k then top-p across tiles", spread(), 0.7, 3, 0.5, 0.0),
    ("top-p alone", spread(), 1.0, 0, 0.9, 0.0),
    ("min-p alone", spread(), 1.0, 0, 1.0, 0.5),
    ("top-k larger than the tokens with p > 0", two_alive(), 1.0, 3, 1.0, 0.0),
    ("top-k larger than the tokens with p > 0, then top-p", two_alive(), 1.0, 3, 0.9, 0.0),
    ("top-p 1 keeps a token the float32 sum cannot see", vanishing_first(), 1.0, 0, 1.0, 0.0),
    ("top-k 1 keeps exactly the largest p, not the one a float step below", one_ulp_below(), 1.0, 1, 1.0, 0.0),
    ("top-k 2 keeps both", one_ulp_below(), 1.0, 2, 1.0, 0.0),
    ("top-p ends on the token where top-k ends", top_k_meets_top_p(), 1.0, 2, 0.6, 0.0),
    ("top-p takes its share of the mass top-k kept, not of the row's", top_p_of_what_top_k_kept(), 1.0, 2, 0.5, 0.0),
    ("top-p drops a token whose mass above is exactly top_p of the kept mass (kept means strictly less)",
     mass_above_equals_the_share(), 1.0, 0, 16 / 17, 0.0),
    ("top-k 2 finds its threshold exactly among p near 4e-18, not to within 2^-30 or 2^-64",
     tiny_neighbours(), 1.0, 2, 1.0, 0.0),
]


@pytest.mark.task("4.3")
def test_kernel_picks_the_reference_token_on_edge_rows():
    logits = torch.stack([row[1] for row in ROWS for _ in UNIFORMS])
    column = lambda i, dtype=torch.float32: torch.tensor([row[i] for row in ROWS for _ in UNIFORMS], dtype=dtype)  # noqa: E731
    uniforms = torch.tensor(UNIFORMS * len(ROWS))
    args = (logits, column(2), column(3, torch.int64), column(4), column(5), uniforms)
    got, expected = sample(*args).tolist(), sample_reference(*args).tolist()
    wrong = [f"{ROWS[i // len(UNIFORMS)][0]}, u={UNIFORMS[i % len(UNIFORMS)]}: token {g}, expected {e}"
             for i, (g, e) in enumerate(zip(got, expected)) if g != e]
    assert not wrong, "the kernel picked another token than the reference:\n" + "\n".join(wrong)
