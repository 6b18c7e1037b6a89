"""Overlap scheduling (miniyaie/backends/overlap.py): the host records step N while the model runs step N+1.

The same requests through the plain loop and the overlapped one must give
the same tokens and finish reasons, end with the same blocks in use, and
never leak one, whatever stops a request (end-of-sequence, a stop token,
max_tokens, an abort, preemption) one step late. A counter proves the steps
really were launched ahead, and a model held still proves that step()
returns while the model runs.
"""

import threading

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test
from tiny_models import save_tiny_model, transformers_greedy

from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.engine.sampling_params import SamplingParams
from miniyaie.model import load_model

pytestmark = pytest.mark.ungraded  # provided machinery (backends/overlap.py), not a learner's task
EOS = 7  # the tiny model's end-of-sequence id in these tests: sampled now and then


@pytest.fixture(scope="module")
def tiny_loaded(tmp_path_factory):
    """A tiny random Llama with a byte-level tokenizer, loaded for InferenceEngine."""
    from tiny_tokenizer import save_tiny_chat_model

    from miniyaie.model import load

    directory = tmp_path_factory.mktemp("tiny-llama-chat-overlap")
    save_tiny_chat_model(directory)
    return load(str(directory))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama-overlap")
    return path, save_tiny_model("llama", path), load_model(path)


def engine_for(tiny, overlap: bool, **config) -> LLMEngine:
    settings_ = dict(block_size=4, num_blocks=64, attention_backend="torch", max_num_seqs=8, overlap_schedule=overlap)
    return LLMEngine(tiny[2], EngineConfig(**{**settings_, **config}))


def check_blocks(engine: LLMEngine) -> None:
    if hasattr(engine.memory, "check_integrity"):
        engine.memory.check_integrity()


def drive(engine: LLMEngine, requests, arrivals, abort_at=None, max_steps=400, eos=EOS):
    """Add request i after arrivals[i] calls of step(); abort_at = (request index, step call). Returns
    {index: (tokens, finish reason)} from the events, every step checking the memory's accounting."""
    ids, results, calls = {}, {}, 0
    pending = sorted(range(len(requests)), key=lambda i: arrivals[i])
    while pending or engine.has_unfinished():
        while pending and arrivals[pending[0]] <= calls:
            i = pending.pop(0)
            prompt, params = requests[i]
            ids[engine.add_request(prompt, params, [eos])] = i
            results[i] = ([], None)
        if abort_at is not None and calls == abort_at[1] and abort_at[0] in results:
            rid = next(r for r, i in ids.items() if i == abort_at[0])
            engine.abort(rid)
            results[abort_at[0]] = (results[abort_at[0]][0], "abort")
        for event in engine.step():
            tokens, reason = results[ids[event.request_id]]
            assert reason is None, f"request {ids[event.request_id]} got a token after it ended ({reason})"
            tokens.append(event.token_id)
            results[ids[event.request_id]] = (tokens, event.finish_reason)
        check_blocks(engine)
        calls += 1
        assert calls < max_steps, "the engine did not finish its requests"
    return results


request = st.tuples(
    st.lists(st.integers(1, 319), min_size=1, max_size=18),
    st.builds(
        lambda max_tokens, sampled, seed, stop, min_tokens: SamplingParams(
            max_tokens=max_tokens, temperature=0.9 if sampled else 0.0, seed=seed if sampled else None,
            stop_token_ids=[stop] if stop else [], min_tokens=min(min_tokens, max_tokens)),
        st.integers(1, 12), st.booleans(), st.integers(0, 3), st.sampled_from([0, 11, 200]), st.integers(0, 3),
    ),
)


@settings(max_examples=12)
@given(
    requests=st.lists(request, min_size=1, max_size=6),
    arrivals=st.lists(st.integers(0, 6), min_size=6, max_size=6),
    num_blocks=st.sampled_from([10, 16, 64]),
    caching=st.booleans(),
    budget=st.sampled_from([8, 32]),
)
@example(requests=[([1, 2, 3], SamplingParams(max_tokens=12))] * 5, arrivals=[0, 0, 1, 2, 3, 4], num_blocks=10,
         caching=True, budget=32).via("a pool too small for all five: preemption of requests in flight")
def test_overlap_gives_the_plain_loops_tokens_and_blocks(tiny, requests, arrivals, num_blocks, caching, budget):
    config = dict(num_blocks=num_blocks, enable_prefix_caching=caching, max_num_batched_tokens=budget)
    plain, overlapped = engine_for(tiny, False, **config), engine_for(tiny, True, **config)
    expected = drive(plain, requests, arrivals)
    got = drive(overlapped, requests, arrivals)
    for i in expected:
        assert got[i] == expected[i], f"request {i}: overlapped {got[i]}, plain loop {expected[i]}"
    assert overlapped.num_request_blocks == 0, "a request's block never came back"
    assert overlapped.memory.num_used_blocks == plain.memory.num_used_blocks, "the prefix cache kept other blocks"
    for name in ("finished_requests", "output_tokens", "cached_tokens"):
        assert overlapped.counters[name] == plain.counters[name], name
    assert overlapped.counters["overlapped_steps"] > 0 and plain.counters["overlapped_steps"] == 0


def test_stops_seen_one_step_late_end_requests_as_the_plain_loop_does(tiny):
    """End-of-sequence and stop tokens taken from real outputs, so that they fire; at the last allowed
    token too, where the plain loop says "stop" for end-of-sequence and "length" for a stop token."""
    prompts = [[1, 2, 3, 4, 5], [9, 8, 7, 6], [40, 41], [100, 3, 17]]
    free = drive(engine_for(tiny, False), [(p, SamplingParams(max_tokens=10, ignore_eos=True)) for p in prompts], [0] * 4)
    eos, stop = free[0][0][3], free[1][0][5]
    requests = [(prompts[0], SamplingParams(max_tokens=10)), (prompts[1], SamplingParams(max_tokens=10, stop_token_ids=[stop])),
                (prompts[2], SamplingParams(max_tokens=10)), (prompts[3], SamplingParams(max_tokens=10, stop_token_ids=[stop])),
                (prompts[0], SamplingParams(max_tokens=free[0][0].index(eos) + 1)),  # end-of-sequence is the last allowed
                (prompts[1], SamplingParams(max_tokens=free[1][0].index(stop) + 1, stop_token_ids=[stop]))]
    arrivals = [0, 0, 0, 1, 2, 2]
    expected = drive(engine_for(tiny, False), requests, arrivals, eos=eos)
    assert expected[0][1] == "stop" and expected[1][1] == "stop", "the chosen tokens must end these requests"
    assert expected[4][1] == "stop" and expected[5][1] == "length"
    engine = engine_for(tiny, True)
    got = drive(engine, requests, arrivals, eos=eos)
    for i in expected:
        assert got[i] == expected[i], f"request {i}: overlapped {got[i]}, plain loop {expected[i]}"
    assert engine.num_request_blocks == 0 and engine.counters["overlapped_steps"] > 0


def test_greedy_tokens_equal_transformers_with_overlap(tiny):
    prompts = [list(range(1, 18)), [5, 6, 7], list(range(30, 60))]
    engine = engine_for(tiny, True)
    outputs = engine.generate(prompts, SamplingParams(max_tokens=6, ignore_eos=True))
    assert [o.token_ids for o in outputs] == [transformers_greedy(tiny[1], p, 6) for p in prompts]
    assert engine.counters["overlapped_steps"] == engine.counters["steps"], "every step of this batch overlaps"


@pytest.mark.parametrize("when", [1, 2, 5])
def test_an_abort_while_a_step_is_in_flight_returns_every_block(tiny, when):
    requests = [([1, 2, 3, 4, 5], SamplingParams(max_tokens=10, ignore_eos=True))] * 3
    expected = drive(engine_for(tiny, False), requests, [0, 0, 0], abort_at=(1, when))
    engine = engine_for(tiny, True)
    got = drive(engine, requests, [0, 0, 0], abort_at=(1, when))
    assert got[0] == expected[0] and got[2] == expected[2]
    assert len(got[1][0]) <= len(expected[1][0]) + 1 and got[1][1] == "abort"
    assert engine.num_request_blocks == 0


def test_a_request_that_needs_its_tokens_on_the_host_runs_plain_steps(tiny):
    """A penalty reads the output, so no step overlaps while such a request lives; tokens still equal."""
    requests = [([1, 2, 3], SamplingParams(max_tokens=8, ignore_eos=True)),
                ([9, 8, 7], SamplingParams(max_tokens=4, ignore_eos=True, repetition_penalty=1.3))]
    expected = drive(engine_for(tiny, False), requests, [0, 3])
    engine = engine_for(tiny, True)
    got = drive(engine, requests, [0, 3])
    assert got == expected
    overlapped, steps = engine.counters["overlapped_steps"], engine.counters["steps"]
    assert 0 < overlapped < steps, f"{overlapped} of {steps} steps overlapped: only those without the penalty may"


def test_completions_of_n_fork_on_a_plain_step_and_then_overlap(tiny):
    """n > 1: the other completions fork from their parent's prompt logits, a plain step's work."""

    def run(overlap):
        engine, events = engine_for(tiny, overlap), {}
        engine.add_request([1, 2, 3, 4, 5], SamplingParams(n=3, max_tokens=9, temperature=0.8, seed=3, ignore_eos=True))
        engine.add_request([9, 8, 7], SamplingParams(n=2, max_tokens=6), [EOS])
        for _ in range(100):
            if not engine.has_unfinished():
                break
            for event in engine.step():
                events.setdefault(event.request_id, []).append((event.token_id, event.finish_reason))
        assert engine.num_request_blocks == 0
        return events, engine.counters

    expected, _ = run(False)
    got, counters = run(True)
    assert len(expected) == 5 and got == expected
    assert 0 < counters["overlapped_steps"] < counters["steps"], "the fork's step runs plain, the rest overlap"


def test_step_returns_while_the_model_still_runs(tiny):
    engine = engine_for(tiny, True)
    forward, release, running, done = engine.runner.forward, threading.Event(), threading.Event(), []

    def held_forward(*args):
        running.set()
        assert release.wait(30), "the test never let the model go on"
        done.append(forward(*args))
        return done[-1]

    engine.runner.forward = held_forward
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=3, ignore_eos=True))
    returned = []
    caller = threading.Thread(target=lambda: returned.append(engine.step()), daemon=True)
    caller.start()
    caller.join(10)  # the model is held all this time
    step_came_back = not caller.is_alive()
    release.set()
    caller.join(30)
    assert running.is_set(), "the model was never asked to run the step"
    assert step_came_back, "step() waited for the model to finish: nothing overlaps"
    assert returned == [[]], "the first step's tokens cannot be known when step() returns"
    engine.wait_for_model()
    assert len(done) == 1, "wait_for_model returns once the step in flight has run"
    tokens = [e.token_id for _ in range(10) if engine.has_unfinished() for e in engine.step()]
    assert len(tokens) == 3


def test_a_failing_model_step_raises_and_the_engine_goes_on(tiny):
    engine = engine_for(tiny, True)
    forward = engine.runner.forward
    rid = engine.add_request([1, 2, 3], SamplingParams(max_tokens=4, ignore_eos=True))

    def broken(*args):
        raise RuntimeError("device fault")

    engine.runner.forward = broken
    with pytest.raises(RuntimeError, match="device fault"):
        for _ in range(3):
            engine.step()
    engine.runner.forward = forward
    engine.abort(rid)  # what the engine thread's fault boundary does with the requests the step held
    while engine.has_unfinished():
        engine.step()
    assert engine.num_request_blocks == 0
    outputs = engine.generate([[1, 2, 3]], SamplingParams(max_tokens=4, ignore_eos=True))
    assert len(outputs[0].token_ids) == 4


def test_overlap_is_off_by_default_and_refuses_what_it_cannot_run():
    assert EngineConfig().overlap_schedule is False
    with pytest.raises(ValueError, match="speculative"):
        EngineConfig(overlap_schedule=True, speculative="ngram")  # drafts need the tokens on the host
    with pytest.raises(ValueError, match="true or false"):
        EngineConfig(overlap_schedule="yes")


def test_the_engine_thread_with_stop_strings_and_logprobs_gives_the_plain_loops_outputs(tiny_loaded):
    """Through InferenceEngine: the engine thread, the detokenizer, stop strings (the engine's finish())."""
    from miniyaie.engine import InferenceEngine

    prompts = ["Once upon a time there", "hello", "1, 2, 3,", "The cat"]
    settings_ = dict(block_size=4, num_blocks=96, max_num_batched_tokens=32)

    def run(overlap, **params):
        with InferenceEngine(tiny_loaded, EngineConfig(**settings_, overlap_schedule=overlap)) as engine:
            results = engine.generate(prompts, max_tokens=12, logprobs=2, **params)
            stats = engine.get_stats()
        assert stats["kv_blocks"]["held_by_requests"] == 0
        return [(r.text, r.token_ids, r.finish_reason, [round(x.logprob, 4) for x in r.logprobs]) for r in results], stats

    plain, _ = run(False)
    stops = [text[3:5] for text, *_ in plain if len(text) > 5][:2]  # strings each plain output really contains
    assert stops, "the tiny model wrote nothing to stop on"
    expected, _ = run(False, stop=stops)
    got, stats = run(True, stop=stops)
    assert got == expected
    assert stats["overlapped_steps"] > 0


class OverlapMachine(RuleBasedStateMachine):
    """Requests arrive, steps run, callers abort or end a completion (a stop string) at any moment, a step
    always possibly in flight. After every rule the memory's accounting holds; at the end every block is
    back, and each request that ran to its own end has exactly the plain loop's tokens."""

    tiny = None  # set by the test: the module's tiny model

    @initialize(caching=st.booleans(), num_blocks=st.sampled_from([12, 64]))
    def start(self, caching, num_blocks):
        self.config = dict(num_blocks=num_blocks, enable_prefix_caching=caching, max_num_batched_tokens=16)
        self.engine = engine_for(self.tiny, True, **self.config)
        self.requests, self.results, self.cut = {}, {}, set()  # id -> (prompt, params); id -> [tokens, reason]

    @rule(prompt=st.lists(st.integers(1, 319), min_size=1, max_size=10), max_tokens=st.integers(1, 8),
          seed=st.none() | st.integers(0, 3))
    def add(self, prompt, max_tokens, seed):
        params = SamplingParams(max_tokens=max_tokens, temperature=0.0 if seed is None else 0.9, seed=seed)
        rid = self.engine.add_request(prompt, params, [EOS])
        self.requests[rid], self.results[rid] = (prompt, params), [[], None]

    @rule()
    def step(self):
        for event in self.engine.step():
            tokens_reason = self.results[event.request_id]
            assert tokens_reason[1] is None, f"{event.request_id} got a token after it ended"
            tokens_reason[0].append(event.token_id)
            tokens_reason[1] = event.finish_reason

    @precondition(lambda self: any(r[1] is None for r in self.results.values()))
    @rule(data=st.data(), stop_string=st.booleans())
    def end_early(self, data, stop_string):
        rid = data.draw(st.sampled_from(sorted(r for r, (_, reason) in self.results.items() if reason is None)))
        if stop_string:
            self.engine.finish(rid)  # what the output processor does on a stop string
        else:
            self.engine.abort(rid)
        self.results[rid][1] = "cut"
        self.cut.add(rid)

    @invariant()
    def accounting_holds(self):
        if hasattr(self, "engine"):
            check_blocks(self.engine)

    def teardown(self):
        if not hasattr(self, "engine"):
            return
        for _ in range(200):
            if not self.engine.has_unfinished():
                break
            self.step()
        assert not self.engine.has_unfinished(), "the engine did not finish its requests"
        assert self.engine.num_request_blocks == 0, "a request's block never came back"
        ran = [rid for rid in self.requests if rid not in self.cut]
        if ran:
            plain = engine_for(self.tiny, False, **self.config)
            ids = {plain.add_request(*self.requests[rid], [EOS]): rid for rid in ran}
            expected = {rid: [[], None] for rid in ran}
            while plain.has_unfinished():
                for event in plain.step():
                    expected[ids[event.request_id]][0].append(event.token_id)
                    expected[ids[event.request_id]][1] = event.finish_reason
            for rid in ran:
                assert self.results[rid] == expected[rid], f"{rid}: overlapped {self.results[rid]}, plain {expected[rid]}"


def test_overlap_state_machine(tiny):
    OverlapMachine.tiny = tiny
    run_state_machine_as_test(OverlapMachine, settings=settings(max_examples=15, stateful_step_count=25, deadline=None))
