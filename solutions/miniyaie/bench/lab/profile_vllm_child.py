"""Runs in vLLM's environment (started by profile_ops.py): the workload through vllm.LLM in this process, under torch.profiler."""
import json, sys, time, os
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process, so the profiler sees it


def main(request_path, out_path):
    request = json.load(open(request_path))
    import torch
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    llm = LLM(model=request["model"], dtype="float32", enable_prefix_caching=request["enable_prefix_caching"], seed=0)
    prompts = [TokensPrompt(prompt_token_ids=ids) for ids in request["prompts"]]
    params = [SamplingParams(max_tokens=n, ignore_eos=True, temperature=0) for n in request["output_lens"]]
    llm.generate(prompts[:2], params[:2], use_tqdm=False)  # warm
    llm.reset_prefix_cache()  # the timed run finds nothing cached, as ours does
    start = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30)
    open(out_path, "w").write(f"seconds under the profiler: {seconds:.2f}\n{table}\n")
    print(f"seconds under the profiler: {seconds:.2f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
