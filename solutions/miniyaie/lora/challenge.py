"""The reference's entry to chapter 11's challenge (`miniyaie challenge 11`): read it once you have a score of your own.

It stays in solutions/: `course sync` does not copy a chapter package's
challenge.py into chapters/, where the learner writes their own. The
reference column runs its `make_policy`.

It reads first the adapter with the most requests waiting per millisecond
of reading (Smith's rule for the least mean wait: a burst's adapter before
one request's rank-64 adapter), and replaces the idle adapter whose reload
is expected to cost least: how often it is asked for (each arrival counted,
halved every 10 simulated seconds) times its rank, the least recently run
on a tie. Each half alone gets about half of the gain: the reading order
203.4, the victims 207.3. It reads nothing ahead: reading the most
asked-for adapter that is not resident whenever the reader was idle scored
258.4, the reader busy with a guess when a burst arrived. With a slot for
every adapter the same trace waits about 65 ms (each adapter read once, in
the reference's order): the rest of the reference's wait is adapters read
again after being replaced.
"""

from __future__ import annotations

HALF_LIFE_MS = 10_000.0  # how long the policy remembers how often an adapter is asked for


class CostAwareReads:
    """Read first the most requests waiting per ms of reading; evict the idle adapter cheapest to read again.

    The policy's five calls are the harness's LRU's (the page lists them); it reads nothing ahead."""

    def __init__(self, num_slots: int, ranks: dict[str, int]):
        self.ranks, self.asked, self.when, self.last_step = ranks, {}, {}, {}

    def on_step(self, adapters: set[str], now_ms: float) -> None:
        for name in adapters:
            self.last_step[name] = now_ms

    def prefetch(self, resident: list[str], now_ms: float) -> str | None:
        return None

    def _rate(self, name: str, now_ms: float) -> float:  # arrivals, each halved every HALF_LIFE_MS since
        return self.asked.get(name, 0.0) * 0.5 ** ((now_ms - self.when.get(name, now_ms)) / HALF_LIFE_MS)

    def on_arrival(self, adapter: str, now_ms: float) -> None:
        self.asked[adapter], self.when[adapter] = self._rate(adapter, now_ms) + 1, now_ms

    def next_read(self, waiting: dict[str, int], now_ms: float) -> str:
        return max(waiting, key=lambda name: waiting[name] / self.ranks[name])

    def victim(self, idle: list[str], now_ms: float) -> str | None:
        return min(idle, key=lambda name: (self._rate(name, now_ms) * self.ranks[name], self.last_step.get(name, -1.0)))


def make_policy(num_slots: int, ranks: dict[str, int]) -> CostAwareReads:
    return CostAwareReads(num_slots, ranks)
