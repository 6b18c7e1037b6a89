"""The fast CPU backend: provided machinery that runs chapter 0's model fast on a CPU (no learner task here).

    paged_attention.py           the `cpu` attention backend: decode rows and chunks through C++ loops
                                 over the paged cache (the batched torch backend where they cannot run)
    paged_decode_attention.cpp   decode attention, walking shared first blocks once per group
    paged_chunk_attention.cpp    prefill and extend chunks, keys in tiles of one vector register
    cpu_vector.h                 the vector width and helpers both attention loops share
    layer_ops.py, layer_ops.cpp  add + RMSNorm, in-place RoPE, SiLU-and-mul, each in one pass
    linear.py                    linear layers on oneDNN with packed (and merged) weights
    kernels.py                   builds the three C++ sources into one cached library, loads it with ctypes
    allocator.py                 glibc told to keep freed memory in the process
    runtime.py                   the command started again on Intel's OpenMP and tcmalloc

The model never imports this package: backends/choose.py installs it on a
model (its attention backend, layer ops and linears) when the engine asks for
the cpu backend. Importing the package imports nothing, so that runtime.py
can relaunch the process before torch is loaded.
"""
