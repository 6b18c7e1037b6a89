"""Runs inside vLLM's own environment: one offline workload through `vllm.LLM`, timed.

    <vLLM venv>/bin/python vllm_child.py REQUEST.json RESULT.json

It imports nothing from miniyaie (that environment has its own torch).
The protocol, both ways JSON:

    REQUEST  {"model": dir, "dtype": "float32", "enable_prefix_caching": bool,
              "prompts": [[token ids]], "output_lens": [int], "speculative_config": dict or null,
              "sampling": {"temperature": float, "top_p": float, "top_k": int} or null (greedy)}
    RESULT   {"system": str, "seconds": float, "output_tokens": int,
              "outputs": [[token ids]], "startup_seconds": float}

Only `generate` is timed, not the start-up (vLLM compiles the model first).
A failure exits non-zero with the reason on stderr; the parent reports it.
"""

import json
import sys
import time


def main(request_path: str, result_path: str) -> int:
    with open(request_path) as f:
        request = json.load(f)
    started = time.perf_counter()
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    speculative = request.get("speculative_config")
    extra = {"speculative_config": speculative} if speculative else {}
    llm = LLM(model=request["model"], dtype=request.get("dtype", "float32"),
              enable_prefix_caching=request["enable_prefix_caching"], seed=0, **extra)
    prompts = [TokensPrompt(prompt_token_ids=ids) for ids in request["prompts"]]
    sampling = request.get("sampling") or {"temperature": 0}
    params = [SamplingParams(max_tokens=n, ignore_eos=True, **sampling) for n in request["output_lens"]]
    startup = time.perf_counter() - started
    start = time.perf_counter()
    results = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    outputs = [list(r.outputs[0].token_ids) for r in results]
    caching = "prefix cache on" if request["enable_prefix_caching"] else "prefix cache off"
    if speculative:
        caching += f", {speculative['method']} speculation k={speculative['num_speculative_tokens']}"
    if sampling.get("temperature"):
        caching += ", sampled"
    with open(result_path, "w") as f:
        json.dump({"system": f"vllm {vllm.__version__} ({caching})", "seconds": seconds,
                   "output_tokens": sum(map(len, outputs)), "outputs": outputs, "startup_seconds": startup}, f)
    return 0


if __name__ == "__main__":  # vLLM spawns its engine core: everything runs under this guard
    sys.exit(main(sys.argv[1], sys.argv[2]))
