"""The reference's entry to chapter 0's challenge (`miniyaie challenge 0`): read it once you have a score of your own.

It stays in solutions/: `course sync` does not copy a chapter package's
challenge.py into chapters/. The reference's entry is its chapter code
itself: the reference column scores the reference tree, whose
`generate_stream` (model/generate.py) builds the cache it counts; this file
says what that code chose and where the room is.

The reference gives every sequence one contiguous region as long as the
longest prompt plus `max_tokens` (8 × 232 slots): one block size for all,
so a slot is `sequence × block_size + position`. The short prompts leave
most of their region empty. Regions of each sequence's own length, laid out
one after the other, reach the floor for this batch; chapter 2 takes the
idea further, to pages allocated as the tokens arrive.
"""
