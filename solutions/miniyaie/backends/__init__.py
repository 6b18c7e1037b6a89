"""Provided machinery that runs the model fast, beside the chapters (no learner task lives here).

    choose.py                  which attention backend an engine uses, and installing it on a model
    batched_attention.py       the `torch` backend: the whole step batched with torch ops
    cpu/                       the fast CPU backend (C++ attention, layer ops and block linears, oneDNN linears, runtime)
    cuda_graphs.py             decode steps recorded once as CUDA graphs and replayed (a GPU)
    static_inputs.py           the static buffers a replayed step reads, padded to a batch ladder
    static_decode_attention.py decode attention with launch sizes fixed per padded batch
    merged_projections.py      q/k/v and gate/up as one matmul each
    step_threads.py            how many CPU threads a step runs on (one or all: what ran faster lately)
    overlap.py                 overlap scheduling: the model runs a step while the host records the one before
    draft_prefill.py           a draft model's copies and pool, its prefill chunked and shared (chapter 9)
    seeded_draws.py            a seeded request's verify rows drawn in position order (chapter 9)
"""
