"""The reference's entry to chapter 7's challenge (`miniyaie challenge 7`): read it once you have a score of your own.

It stays in solutions/: `course sync` does not copy a chapter package's
challenge.py into chapters/. The reference's entry is its chapter code
itself: the reference column scores the reference tree, whose rank 0
broadcasts the step (distributed/runtime.py) that the harness measures; this
file says what that code chose and where the room is.

The reference sends the model call as rank 0 made it: the token ids, the
positions, the slot of every new token, each sequence's query and total
lengths, its block table padded to the longest row of the step (int64
tensors), the rows that need logits and the block copies. Much of that a
worker could work out: positions follow from the lengths, and every slot
from a block table and a position. The rest it mostly knew already: a
running request's block table grows by at most one block a step, and only
rows that changed need saying. The ids fit in 32 bits: sending the four
tensors as int32, widened again on the worker, scored 377 on its own. Each
of these makes the worker do work rank 0 did, and keep state between steps
that must stay equal to rank 0's (vLLM's workers keep each request's state
and are sent what changed; a worker that misses one message is wrong for
good).
"""
