"""The measuring tools, each side by side with a peer (`miniyaie bench ...`, `miniyaie harness`).

    offline.py, runners.py, workloads.py   offline throughput: our engine and transformers on the same prompts
    vllm_env.py, vllm_peer.py, vllm_child.py   vLLM's CPU build as a peer, in an environment of its own
    serve.py                               a live OpenAI-compatible server: TTFT, ITL, e2e, tok/s per concurrency
    serve_peers.py                         chapter 6's serving table: each server started fresh, measured, stopped
    kernel_harness.py, kernel_cases.py     chapter 4's kernels: correctness, and timings on a GPU
    lab/                                   one-off measurements behind the book's figures (`python -m miniyaie.bench.lab.<name>`)
"""
