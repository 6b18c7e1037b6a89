"""Shared test setup: hypothesis profiles and model fixtures.

The implementation under test (reference or student tree) is chosen by the
course plugin (`--impl`, see miniyaie/course/pytest_plugin.py); tests import
chapter code only through `miniyaie.<package>`.
"""

from __future__ import annotations

import os

# Idle OpenMP threads sleep instead of spinning (set before torch loads its OpenMP runtime). By default
# each of torch's threads spins for a while after every parallel op, so on two cores a test of many small
# ops, a server beside its client, or a second process spends a core spinning: one hypothesis test of
# attention steps took 41.5 s of CPU spinning and 5.7 s passive, with the same two threads doing the work.
# Subprocesses (CLI, servers, tensor-parallel ranks) inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402 - after the OpenMP setting above
from hypothesis import HealthCheck, Phase, settings  # noqa: E402

# "ci": deterministic and without deadlines (a 2-core machine has noisy timing).
settings.register_profile(
    "ci", deadline=None, derandomize=True, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None, max_examples=200)
# "grading": `miniyaie grade` shows a learner one minimal failing example per test, not a group of them.
settings.register_profile("grading", settings.get_profile("ci"), report_multiple_bugs=False)
# "mutants": `course holes` / `course mutants` only ask whether a test fails, so no shrinking.
settings.register_profile("mutants", settings.get_profile("ci"), phases=[Phase.explicit, Phase.reuse, Phase.generate])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Without a GPU, Triton kernels (chapter 4) run in its interpreter, which must be
# chosen before anything imports triton (transformers does while building models).
if not __import__("torch").cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def smollm2_dir():
    """The bundled SmolLM2-135M-Instruct as a Hugging Face directory (converted once)."""
    from miniyaie.model.loader import bundled_model_dir

    return bundled_model_dir()
