"""The chapters of the course: package, book page and test folder of each."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from miniyaie._switch import CHAPTER_PACKAGES, REPO_ROOT, SOLUTIONS_ROOT


@dataclass(frozen=True)
class Chapter:
    number: int
    title: str
    stem: str  # shared by the book page and the test folder

    @property
    def package(self) -> str:
        return CHAPTER_PACKAGES[self.number]

    @property
    def page(self) -> str:
        return f"book/src/{self.stem}.md"

    @property
    def tests(self) -> str:
        return f"tests/{self.stem}"

    @property
    def solution_dir(self) -> Path:
        return SOLUTIONS_ROOT / self.package


CHAPTERS: list[Chapter] = [
    Chapter(0, "The model and its KV cache", "ch00_model"),
    Chapter(1, "The scheduler", "ch01_scheduler"),
    Chapter(2, "The paged KV cache", "ch02_paged_kv_cache"),
    Chapter(3, "The radix tree", "ch03_radix_tree"),
    Chapter(4, "Triton kernels", "ch04_triton_kernels"),
    Chapter(5, "The engine", "ch05_engine"),
    Chapter(6, "The API server", "ch06_api"),
    Chapter(7, "Tensor parallelism", "ch07_tensor_parallel"),
    Chapter(8, "Structured output", "ch08_structured_output"),
]


def chapter(number: int) -> Chapter:
    for ch in CHAPTERS:
        if ch.number == number:
            return ch
    raise ValueError(f"no chapter {number}; chapters are 0-{CHAPTERS[-1].number}")


def repo_path(relative: str) -> Path:
    return REPO_ROOT / relative
