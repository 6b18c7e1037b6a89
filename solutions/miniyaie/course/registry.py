"""The chapters of the course: package, book pages and test folder of each."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from miniyaie._switch import CHAPTER_PACKAGES, REPO_ROOT, SOLUTIONS_ROOT

TASK_HEADING = re.compile(r"^### Task (\d+\.\d+): ", re.M)


@dataclass(frozen=True)
class Chapter:
    number: int
    title: str
    stem: str  # shared by the chapter's first book page and its test folder
    more_pages: tuple[str, ...] = ()  # stems of the chapter's later pages, in book order

    @property
    def package(self) -> str:
        return CHAPTER_PACKAGES[self.number]

    @property
    def pages(self) -> tuple[str, ...]:
        """The chapter's pages in book order, repository-relative (`book/src/...md`); the first opens it."""
        return tuple(f"book/src/{stem}.md" for stem in (self.stem, *self.more_pages))

    @property
    def page(self) -> str:
        """The chapter's first page: where it begins (and where a row about the whole chapter points)."""
        return self.pages[0]

    def page_of(self, task: str) -> str:
        """The page whose `### Task N.M:` heading is `task`'s; the first page if none has it (yet)."""
        for page in self.pages:
            path = REPO_ROOT / page
            if path.is_file() and task in _tasks_on(path, path.stat().st_mtime_ns):
                return page
        return self.page

    @property
    def tests(self) -> str:
        return f"tests/{self.stem}"

    @property
    def solution_dir(self) -> Path:
        return SOLUTIONS_ROOT / self.package


@lru_cache(maxsize=64)
def _tasks_on(path: Path, mtime_ns: int) -> frozenset[str]:
    """The task ids whose headings are on a page (cached until the page changes)."""
    return frozenset(TASK_HEADING.findall(path.read_text()))


CHAPTERS: list[Chapter] = [
    Chapter(0, "The model and its KV cache", "ch00_model"),
    Chapter(1, "The scheduler", "ch01_scheduler"),
    Chapter(2, "The paged KV cache", "ch02_paged_kv_cache"),
    Chapter(3, "The radix tree", "ch03_radix_tree"),
    Chapter(4, "Triton kernels", "ch04_triton_kernels"),
    Chapter(5, "The engine", "ch05_engine", ("ch05_engine_loop", "ch05_performance")),
    Chapter(6, "The API server", "ch06_api"),
    Chapter(7, "Tensor parallelism", "ch07_tensor_parallel"),
    Chapter(8, "Structured output", "ch08_structured_output"),
    Chapter(9, "Speculative decoding", "ch09_speculative"),
    Chapter(10, "Quantization", "ch10_quantization"),
    Chapter(11, "Multi-LoRA serving", "ch11_lora"),
]


def chapter(number: int) -> Chapter:
    for ch in CHAPTERS:
        if ch.number == number:
            return ch
    raise ValueError(f"no chapter {number}; chapters are 0-{CHAPTERS[-1].number}")


def repo_path(relative: str) -> Path:
    return REPO_ROOT / relative
