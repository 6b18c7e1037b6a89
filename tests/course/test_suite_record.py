"""The whole suite's run stands in for `course holes`' record of the reference only when it covered it all."""

from types import SimpleNamespace

import pytest

from miniyaie.course import reference

pytestmark = pytest.mark.ungraded


def entry(chapter, outcome, graded=True, bundled=False, duration=0.5):
    return {"chapter": chapter, "tasks": ["5.1"], "end_to_end": False, "graded": graded, "bundled": bundled,
            "outcome": outcome, "message": "", "duration": duration}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(reference, "CACHE_DIR", tmp_path)
    return tmp_path


def test_two_workers_runs_together_give_every_graded_test_of_the_chapter(cache, monkeypatch):
    collected = {"a": "passed", "b": "passed", "c": "passed"}
    for worker, mine in (("gw0", {"a", "c"}), ("gw1", {"b"})):  # each xdist worker collects all, runs its share
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        results = {n: entry(5, o if n in mine else "not run") for n, o in collected.items()}
        results["ungraded"] = entry(5, "not run", graded=False)  # no worker ran it: not needed
        results["bundled"] = entry(5, "not run", bundled=True)  # mutants leave these out
        results["other chapter"] = entry(6, "not run")
        reference.save_suite_run("k" * 64, results)
    got = reference.load(5, "k" * 64)
    assert sorted((r.nodeid, r.outcome) for r in got) == [("a", "passed"), ("b", "passed"), ("c", "passed")]
    assert reference.load(5, "z" * 64) is None, "another content's key finds nothing"
    assert reference.load(6, "k" * 64) is None, "chapter 6's test never ran: no record for chapter 6"


def test_a_run_that_missed_one_test_is_no_record(cache, monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    reference.save_suite_run("k" * 64, {"a": entry(5, "passed"), "b": entry(5, "not run")})
    assert reference.load(5, "k" * 64) is None


def test_a_run_of_new_content_removes_the_old_contents_records(cache, monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    reference.save_suite_run("a" * 64, {"x": entry(5, "passed")})
    reference.save_suite_run("b" * 64, {"x": entry(5, "passed")})
    assert [p.name for p in cache.glob("suite-*")] == [f"suite-{'b' * 32}-gw0.json"]


def config(keyword="", impl=None, args_source=pytest.Config.ArgsSource.TESTPATHS, task=None):
    options = {"--impl": impl, "--task": task}
    return SimpleNamespace(args_source=args_source, option=SimpleNamespace(keyword=keyword, markexpr="", lf=False,
                           deselect=None), getoption=lambda name: options[name])


def test_only_the_whole_suite_on_the_reference_is_recorded(monkeypatch):
    monkeypatch.delenv("MINIYAIE_IMPL", raising=False)
    assert reference.suite_run_key(config()) is not None
    assert reference.suite_run_key(config(keyword="engine")) is None, "-k: a part of the suite"
    assert reference.suite_run_key(config(args_source=pytest.Config.ArgsSource.ARGS)) is None, "paths given"
    assert reference.suite_run_key(config(task="5.1")) is None
    assert reference.suite_run_key(config(impl="scheduler=chapters")) is None, "not the reference"


def test_the_key_is_the_same_whichever_name_starts_python():
    """CI runs `python -m pytest`, then the `miniyaie` command, whose script starts `python3`: one environment."""
    import subprocess
    import sys
    from pathlib import Path

    code = "from miniyaie.course import reference; print(reference.content_key(2))"
    names = [n for n in ("python", "python3") if (Path(sys.executable).parent / n).exists()]
    keys = {subprocess.run([str(Path(sys.executable).parent / n), "-c", code], capture_output=True, text=True,
                           check=True).stdout for n in names}
    assert len(names) == 2 and len(keys) == 1, (names, keys)
