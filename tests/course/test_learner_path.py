"""The README's `MINIYAIE_IMPL=chapters miniyaie chat` runs the learner's code, chapter by chapter.

For each chapter on the chat / generate / serve path, the command runs with that chapter from the
committed student tree (`MINIYAIE_IMPL=<package>=chapters`, whose solution regions are stubs) on a
tiny model: it must fail with a stub's message naming a task of that chapter. If it answered, some
other code would have run in the learner's place (as the fast cpu backend did for chapter 0). With
the reference everywhere the same commands answer.

Not on the default chat path, and checked as such (the command answers with their stubs):
  - chapter 7 runs only with --tensor-parallel-size > 1 (covered: it fails naming a chapter 7 task);
  - chapter 8 runs only for a constrained request (response_format and the like). Not run here:
    `serve` compiles its pattern in a freshly spawned worker process, about 10 s a request on
    2 cores; tests/ch08_structured_output/test_serve_cli_response_format.py serves that path.
  - chapter 4's sampling kernel (Task 4.3) is on no command's path: the engine samples with torch.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.ungraded  # checks the course's promise, not a task

HERE = Path(__file__).resolve().parent
for folder in ("ch00_model", "ch05_engine"):  # tiny_models.py, tiny_tokenizer.py
    if str(HERE.parent / folder) not in sys.path:
        sys.path.append(str(HERE.parent / folder))

STUB = "NotImplementedError: Chapter {n}, Task "
LINE = "attention backend: "
REQUEST = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 3}
# chapter -> its package, when a plain `chat` runs it
CHAT_PATH = {0: "model", 1: "scheduler", 2: "paged", 3: "radix", 5: "engine"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every command's result: {name: {"rc", "stdout", "stderr"}}."""
    from tiny_tokenizer import save_tiny_chat_model

    folder = tmp_path_factory.mktemp("learner-path")
    model = folder / "tiny"
    save_tiny_chat_model(model)
    chat = ["chat", "--message", "hello", "--model", str(model), "--max-tokens", "3"]
    serve = ["serve", "--model", str(model), "--served-model-name", "tiny"]
    plan = {
        "reference chat": {"impl": "solutions", "argv": chat},
        "reference generate": {"impl": "solutions", "argv": ["generate", "hello", *chat[2:]]},
        "reference serve": {"impl": "solutions", "argv": serve, "request": REQUEST},
        "0 asked cpu": {"impl": "model=chapters", "argv": [*chat, "--attention-backend", "cpu"]},
        "6": {"impl": "api=chapters", "argv": serve, "request": REQUEST},
        "7": {"impl": "distributed=chapters", "argv": chat},
        "7 tensor parallel": {"impl": "distributed=chapters", "argv": [*chat, "--tensor-parallel-size", "2"]},
        "8": {"impl": "structured=chapters", "argv": chat},
    }
    plan.update({str(n): {"impl": f"{package}=chapters", "argv": chat} for n, package in CHAT_PATH.items()})
    (folder / "runs.json").write_text(json.dumps(plan))
    # Chapter 4 as a user runs it: its own process, TRITON_INTERPRET unset (the command must set it).
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    kernels = subprocess.Popen([sys.executable, "-m", "miniyaie", *chat], env={**env, "MINIYAIE_IMPL": "kernels=chapters"},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    driver = subprocess.run([sys.executable, str(HERE / "learner_path_driver.py"), str(folder / "runs.json")],
                            capture_output=True, text=True, timeout=600)
    stdout, stderr = kernels.communicate(timeout=600)
    assert driver.returncode == 0, driver.stderr
    results = json.loads(driver.stdout)
    results["4"] = {"rc": kernels.returncode, "stdout": stdout, "stderr": stderr}
    return results


def backend_lines(result) -> list[str]:
    return [line for line in result["stderr"].splitlines() if line.startswith(LINE)]


@pytest.mark.parametrize("name", ["reference chat", "reference generate", "reference serve"])
def test_the_reference_answers_on_the_fast_backend_without_a_word(runs, name):
    result = runs[name]
    assert result["rc"] == 0, result["stderr"]
    assert backend_lines(result) == []  # auto stays the fast cpu backend: nothing to say


@pytest.mark.parametrize("chapter", [*CHAT_PATH, 4, 6])
def test_the_learners_chapter_runs_on_the_readme_path(runs, chapter):
    result = runs[str(chapter)]
    assert result["rc"] != 0, f"chapter {chapter}'s stubs never ran: the command answered\n{result['stdout']}"
    assert STUB.format(n=chapter) in result["stderr"] + result["stdout"], result["stderr"][-2000:]


def test_chapter_0_gets_the_reference_backend_and_says_so(runs):
    assert backend_lines(runs["0"]) == [
        "attention backend: reference (runs your chapter 0 norms, rotary, SwiGLU and attention; the fast cpu backend would bypass them)"
    ]


def test_chapter_4_gets_the_triton_backend_interpreted_and_says_so(runs):
    lines = backend_lines(runs["4"])
    assert len(lines) == 1 and lines[0].startswith("attention backend: triton (runs your chapter 4 kernels"), runs["4"]["stderr"]
    assert "interpreter" in lines[0] and "the fast cpu backend would bypass them" in lines[0]


def test_an_asked_for_cpu_backend_says_it_bypasses_the_learners_layers_and_still_runs_their_decoder(runs):
    """The cpu backend swaps in its own layer functions and attention, not the decoder of Task 0.3."""
    result = runs["0 asked cpu"]
    assert result["rc"] != 0 and STUB.format(n=0) + "3:" in result["stderr"], result["stderr"][-2000:]
    assert backend_lines(result) == [
        "attention backend: cpu, as asked: it bypasses your chapter 0 norms, rotary, SwiGLU and attention (--attention-backend reference runs them)"
    ]


@pytest.mark.parametrize("chapter", [7, 8])
def test_chapters_off_the_default_path_leave_chat_answering(runs, chapter):
    result = runs[str(chapter)]
    assert result["rc"] == 0, result["stderr"]


def test_chapter_7_runs_with_tensor_parallelism(runs):
    result = runs["7 tensor parallel"]
    assert result["rc"] != 0 and STUB.format(n=7) in result["stderr"], result["stderr"][-2000:]


@pytest.mark.parametrize(
    "impl, on_cpu, on_cuda",
    [
        ("solutions", "cpu", "triton"),  # the reference everywhere: the fast backends, as before
        ("scheduler=chapters,engine=chapters", "cpu", "triton"),  # no backend replaces these chapters
        ("model=chapters", "reference", "reference"),
        ("kernels=chapters", "triton", "triton"),
        ("chapters", "reference", "triton"),  # both: the GPU's kernels, the CPU's readable model
    ],
)
def test_auto_picks_the_backend_that_runs_the_learners_code(monkeypatch, impl, on_cpu, on_cuda):
    from miniyaie.backends.choose import describe_choice, resolve_backend_name

    monkeypatch.setenv("MINIYAIE_IMPL", impl)  # read when the backend is chosen; imports nothing
    assert (resolve_backend_name("auto", "cpu"), resolve_backend_name("auto", "cuda")) == (on_cpu, on_cuda)
    for device in ("cpu", "cuda"):
        line = describe_choice("auto", device)
        assert (line is None) == (impl in ("solutions", "scheduler=chapters,engine=chapters"))
        if impl == "chapters":  # whichever it picks, it names the chapter it leaves out and the way to run it
            other = "triton" if device == "cpu" else "reference"
            assert f"it bypasses your chapter {4 if device == 'cpu' else 0} " in line
            assert f"--attention-backend {other} runs them" in line
