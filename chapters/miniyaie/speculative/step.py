"""Speculative decoding in the engine's step: drafts ride along as tokens, one forward checks them (Task 9.3).

Before the scheduler runs, every request that is decoding gets up to K drafts from the proposer, appended
to its output as if they had been generated. The scheduler then treats them like any other tokens: they
count in the token budget, the paged memory gives them slots, chunking and preemption work as before.
Drafts the step does not compute are taken off again (`keep_scheduled`). The runner scores every drafted
position in the same forward, and the sampler picks the target's own token at each: with the request's
settings (temperature, filters, penalties, min_tokens, seed, logprobs), over the output as it would be at
that position. The acceptance rule keeps the drafts equal to those tokens plus the first token that
differs. A stop (an end-of-sequence or stop token) inside that run ends it there. The rest is rewound:
taken off the output, its slots given back (`PagedMemory.truncate`), so neither the pool nor the radix
cache keeps a rejected token.

Every token emitted at a position is the target's own token there, drawn from the distribution decoding
one token at a time would use: greedy output is unchanged, and sampled output has exactly the target's
distribution (for a draft that is a single token, sampling the target and comparing is the
rejection-sampling rule). A seeded request draws the same random number for the same output position
whatever else is in the step, so its tokens are those of decoding without drafts: its rows are drawn in
position order, and its generator is rewound to just after its last emitted token
(backends/seeded_draws.py). Structured output decodes one token per step: its guide would have to follow
every draft.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from miniyaie.backends.seeded_draws import sample_in_position_order
from miniyaie.engine.sampler import SampledToken, SamplingRow
from miniyaie.scheduler import Request, ScheduledChunk, SchedulerOutput
from miniyaie.speculative.acceptance import accept_greedy
from miniyaie.speculative.ngram import NgramProposer


# The proposer searches at most this many of a request's last tokens: its search runs for every decoding
# request at every step, so a very long prompt must not slow every step of every other request.
SEARCH_WINDOW = 2048


def search_window(request: Request, size: int = SEARCH_WINDOW) -> list[int]:
    """The request's last `size` tokens (prompt and output), without copying the rest."""
    output = request.output_token_ids
    if len(output) >= size:
        return output[len(output) - size :]
    return request.prompt_token_ids[max(0, len(request.prompt_token_ids) - (size - len(output))) :] + output


class PromptLookup:
    """The n-gram proposer (Task 9.1) as the step uses a proposer: drafts for a batch of requests."""

    def __init__(self, proposer: NgramProposer):
        self.proposer = proposer

    def draft(self, wanted: list[tuple[Request, int]]) -> dict[str, list[int]]:
        return {r.request_id: self.proposer.propose(search_window(r), k) for r, k in wanted}

    def forget(self, request_id: str) -> None:
        """Nothing to give back: the lookup keeps no state between steps."""


class Speculation:
    """Proposes drafts before a step and verifies them in it; `counters` say how well it pays."""

    def __init__(self, proposer, num_tokens: int, memory, counters: dict[str, int], max_step_tokens: int = 16):
        """`proposer`: a PromptLookup or a DraftModelProposer (`draft(wanted)` -> request id -> drafts;
        `forget(request_id)` when a request ends).

        `counters`: the engine's, where draft_tokens (drafts the model scored), accepted_draft_tokens
        (those it kept), verified_steps (request-steps that scored a draft) and speculation_off_steps (steps
        with requests decoding that drafted nothing: a prompt to prefill, or too many of them) are added up.

        max_step_tokens: the decoding requests' tokens a step may carry, drafts included. Drafts pay only
        while a step is bound by reading the weights; past that point every rejected draft costs compute."""
        self.proposer, self.num_tokens, self.memory, self.counters = proposer, num_tokens, memory, counters
        self.max_step_tokens = max_step_tokens
        self._drafts: dict[str, tuple[Request, int]] = {}  # this step: request id -> (request, drafts appended)
        self.accepted: dict[str, list[SampledToken]] = {}  # this step: the tokens emitted before the sampled one

    # ------------------------------------------------------------ before the scheduler
    # ANCHOR: propose
    def propose(self, running: list[Request], num_waiting: int, eligible: Callable[[Request], bool]) -> None:
        """Append drafts to the requests that may speculate this step, or to none.

        A request is decoding when only its last token is not computed. No request gets drafts when a
        request waits or a running one is not decoding (the step prefills: bound by compute already),
        nor when the decoding requests and at least one draft for each eligible one would pass
        self.max_step_tokens. Otherwise each eligible decoding request asks self.proposer for the same
        number of drafts: as many as fit the budget, at most self.num_tokens, and fewer when its
        max_tokens leaves less room (the target's own token comes after the drafts; no room: no ask).
        Each request's drafts go onto its output and into self._drafts as (request, how many).
        Turned off for a prompt or the budget while some request decodes, the step adds one to
        counters["speculation_off_steps"].
        """
        self._drafts.clear()
        self.accepted.clear()
        # Idea: the budget counts every decoding request's own token before any draft.
        # Stuck? `miniyaie hint 9.3` prints hints, one level at a time.
        # TODO(Task 9.3): Drafts through the step. Replace this line with your code.
        raise NotImplementedError('Chapter 9, Task 3: Drafts through the step — see book/src/ch09_speculative.md')
    # ANCHOR_END: propose

    def forget(self, request_id: str) -> None:
        """A request ended: the proposer gives back what it held for it."""
        self.proposer.forget(request_id)

    # ANCHOR: keep_scheduled
    def keep_scheduled(self, out: SchedulerOutput) -> None:
        """Take off the drafts this step does not compute.

        Before: self._drafts maps each request that got drafts to (request, n), its last n output
        tokens being drafts; the scheduler has made `out`. After: a request keeps exactly the drafts
        its chunk in `out` computes (none if it has no chunk: left out, or preempted); the others are
        off its output, and self._drafts maps each request that kept some to (request, how many). A
        request that keeps none decodes plainly this step: it is not verified, and verified_steps does
        not count it. Nothing else changes (the memory gave slots only to scheduled tokens).
        """
        # Idea: a chunk covers some positions; which drafts' positions are among them?
        # Stuck? `miniyaie hint 9.3` prints hints, one level at a time.
        # TODO(Task 9.3): Drafts through the step. Replace this line with your code.
        raise NotImplementedError('Chapter 9, Task 3: Drafts through the step — see book/src/ch09_speculative.md')
    # ANCHOR_END: keep_scheduled

    # ------------------------------------------------------------ in the step
    def run(self, runner, out: SchedulerOutput, rows: dict[str, SamplingRow],
            fanout: dict[str, list[str]] | None = None):
        """`runner.run(out, rows, fanout)`, with every drafted position scored and the drafts settled.

        For a drafted request the returned token is the last one it emits this step; the ones before it
        are in self.accepted; its chunk in `out` is replaced by one that computed only what it keeps, so
        the scheduler's update records exactly the emitted tokens.
        """
        if not self._drafts:
            return runner.run(out, rows, fanout)
        input_ids, positions, meta = runner.prepare(out)
        last_rows, picked = runner.sampling_rows(out, fanout or {})
        logit_rows, sampling, owners, offsets = [], [], [], []
        for row, rid in zip(last_rows, picked):
            n = self._drafts[rid][1] if rid in self._drafts else 0
            base = rows[rid]
            real = len(base.output_token_ids) - n
            for j in range(n + 1):  # position j predicts the token after draft j (j = 0: after the real tokens)
                logit_rows.append(row - n + j)
                sampling.append(replace(base, output_token_ids=base.output_token_ids[: real + j]) if n else base)
                owners.append(rid)
                offsets.append(j)
        logits = runner.forward(input_ids, positions, meta, logit_rows)
        if not owners:
            return {}
        tokens_of_rows, states = sample_in_position_order(runner.sampler, logits, sampling, owners, offsets)
        per_request: dict[str, list[SampledToken]] = {}
        for rid, token in zip(owners, tokens_of_rows):
            per_request.setdefault(rid, []).append(token)
        sampled = {}
        for rid, tokens in per_request.items():
            sampled[rid] = self._settle(out, rid, tokens, rows[rid]) if rid in self._drafts else tokens[0]
            if rid in states:  # its generator as if it had drawn once per emitted token, and no more
                rows[rid].generator.set_state(states[rid][len(self.accepted.get(rid, ()))])
        return sampled

    # ANCHOR: settle
    def _settle(self, out: SchedulerOutput, rid: str, targets: list[SampledToken], row: SamplingRow) -> SampledToken:
        """Decide what the request keeps of its drafts, and rewind the rest; returns its last token of the step.

        `targets[j]` is the target's own token after the pending token and the first j drafts (n + 1 of
        them for the request's n drafts, self._drafts[rid]). What it emits: exactly what one-token greedy
        decoding would have written, as far as the target confirms it: m kept drafts and targets[m], where m
        counts the drafts accept_greedy keeps, cut so that no stop token (row.params.stop_token_ids, or the
        request's eos_token_ids unless it ignores them) comes before the last emitted token. Invariant afterwards: nothing in the request's
        state remembers a draft it did not keep: its output (all emitted tokens but the last, which the
        scheduler's update appends), its chunk in `out` (the update counts as computed exactly the tokens
        kept) and its paged memory (no block that only rejected drafts used). self.accepted[rid] holds the
        emitted tokens before the last; the counters draft_tokens, accepted_draft_tokens, output_tokens
        and verified_steps grow by n, m, m, 1. A request aborted while the step ran holds nothing any more:
        only the counters and self.accepted change.
        """
        request, n = self._drafts[rid]
        real = request.num_tokens - n  # the request's tokens before its drafts
        drafts = request.output_token_ids[len(request.output_token_ids) - n :]
        # Idea: what the target wrote is the truth; everything the request holds must agree with it.
        # Stuck? `miniyaie hint 9.3` prints hints, one level at a time.
        # TODO(Task 9.3): Drafts through the step. Replace this line with your code.
        raise NotImplementedError('Chapter 9, Task 3: Drafts through the step — see book/src/ch09_speculative.md')
    # ANCHOR_END: settle
