"""The reference's entry to chapter 6's challenge (`miniyaie challenge 6`): read it once you have a score of your own.

It stays in solutions/: `course sync` does not copy a chapter package's
challenge.py into chapters/. The reference's entry is its chapter code
itself: the reference column scores the reference tree, whose histograms
(`LATENCY_BUCKETS` in api/metrics.py) the harness reads; this file says what
that code chose and where the room is.

The reference uses one set of 16 bounds for all three histograms, about
three per power of ten from 1 ms to 120 s (1, 2.5, 5, 10 ...): wide enough
for any latency, coarse everywhere. Most inter-token gaps of this trace lie
between 15 and 250 ms, most end-to-end latencies between 0.5 and 16 s: a
bucket of 10 to 25 ms, or of 5 to 10 s, is where a quantile lands and where
the straight line inside it is wrong. Sixteen bounds spaced evenly on a log
scale from 10 ms to 60 s, the same for all three, scored 7.8%; sixteen per
histogram, each spaced on a log scale over where that histogram's values
are (20 ms to 20 s, 15 to 600 ms, 0.3 to 40 s), scored 4.0%. Bounds fitted
to this one trace would do best here and mislead on a server whose
latencies move.
"""
