"""The reference's entry to chapter 4's challenge (`miniyaie challenge 4`): read it once you have a score of your own.

It stays in solutions/: `course sync` does not copy a chapter package's
challenge.py into chapters/. The reference's entry is its chapter code
itself: the reference column scores the reference tree, whose
`decode_attention` (kernels/decode_attention_kernel.py) the harness times;
this file says what that code chose and where the room is.

Split-KV flash-decoding: the context is cut into splits, one program per
(sequence, KV head, split) computes a partial softmax for the query heads
that share that KV head, and a second kernel merges the partials. At batch
64 × 4 KV heads there are already 256 programs before any split. The split
count (`default_num_splits` picks it from the batch, the KV heads and the
context), the tile of keys each loop iteration loads, and the number of
warps and stages are the knobs; the reference tunes none of them per GPU. It
reaches about 80% of a copy's bandwidth here; the remaining 20% is the
target.
"""
