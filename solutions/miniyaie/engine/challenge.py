"""The reference's entry to chapter 5's challenge (`miniyaie challenge 5`): read it once you have a score of your own.

It stays in solutions/: `course sync` does not copy a chapter package's
challenge.py into chapters/. The reference's entry is its chapter code
itself: the reference column scores the reference tree, whose `Sampler`
(engine/sampler.py) the harness times; this file says what that code chose
and where the room is.

The reference runs each stage once for the whole batch, on the rows that
need it. When every filtering row has a top-k, the provided
`sample_top_columns` filters and draws on each row's top-k columns only;
this batch also has rows without one, so all 48 sampled rows take the
plain path, and a profile of one call shows the sort of those 48 whole
rows as about 40% of it, the penalties about 17%. Only the top-p rows need
a sorted row: a min-p row needs its largest logit, a top-k row its k best.
Grouping the rows by what their filters read, and the penalties' cost over
a long history, are where the time is.
"""
