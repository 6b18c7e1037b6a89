"""The reference's entry to chapter 1's challenge (`miniyaie challenge 1`): read it once you have a score of your own.

It stays in solutions/: `course sync` does not copy a chapter package's
challenge.py into chapters/, where the learner writes their own.

It turns on what Task 1.7 built: long_prefill_token_threshold=128,
max_long_partial_prefills=1. A document then takes at most 128 tokens of a
step while chat turns want tokens, so a burst's turns are admitted within a
step or two instead of after the whole document. On the five scored traces
(budget 512, max_long 1):

    threshold   p99 TTFT (ms)   throughput / plain
    0 (plain)   5013.6          1.000
    64          3323.4          1.056
    79           972.3          1.033
    80           647.8          1.033
    128          666.7          1.021
    256          755.8          0.984

The threshold is a cliff, not a curve: which requests count as long decides
it. Chat prompts reach 80 tokens (93 of the 361 turns have more than 64),
so at 64 those turns are long themselves and queue behind the document for
the one long slot. Steps are not the cause: threshold 64 has the highest
throughput of these. Above 80 every chat turn is short and a larger threshold
only gives the document more of each step. The reference stops there; the
budget (a smaller step ends sooner for a turn that arrives during it),
max_num_seqs and the admission order are the levers it left alone.
"""

from __future__ import annotations

from miniyaie.scheduler import Scheduler, SchedulerConfig


def make_scheduler(memory):
    config = SchedulerConfig(max_num_batched_tokens=512, max_num_seqs=64,
                             long_prefill_token_threshold=128, max_long_partial_prefills=1)
    return Scheduler(config, memory)
