"""Plotting, not a test: profile_ops.py's two tables, grouped into kinds of work, side by side.

    python -m miniyaie.bench.lab.plot_profile_ops DIR [DIR ...] --out ops.png [--json ops.json]

Each DIR holds ours.txt and vllm.txt from one run of profile_ops.py (one workload). Every row
of a table is put in one kind by its operator's name (KINDS below); "rest" is what the run's
seconds under the profiler hold beyond the named kinds: Python (scheduling, sampling, the
model's glue), small torch ops, and rows outside the table's top 30. Self CPU time is the
time of the thread that made the call, so a call that fans out to OpenMP threads counts its
wall time once, and the kinds add up to about the run's seconds.
"""
import argparse
import json
import re
from pathlib import Path

# Kind -> the operators that do that work (ours: miniyaie::* kernels and mkldnn; vLLM: its _C ops and its
# compiled graph, whose fused element-wise loops have no rows of their own). Kernels only: the Python
# around them (our backend's forward, vLLM's vllm::unified_* wrappers) is in "rest" for both.
KINDS = {
    "linear layers": ("mkldnn::_linear_pointwise", "_C::onednn_mm", "aten::addmm", "aten::mm", "aten::linear"),
    "attention": ("miniyaie::paged_chunk_attention", "miniyaie::paged_decode_attention",
                  "_C::cpu_attention_with_kv_cache", "aten::_scaled_dot_product_flash_attention_for_cpu"),
    "writing K/V": ("aten::index_copy_", "_C::cpu_attn_reshape_and_cache"),
    "element-wise layers": ("miniyaie::rms_norm", "miniyaie::silu_mul_halves", "miniyaie::rotary",
                            "## Call CompiledFxGraph None ##"),
}
UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def read_table(path: Path) -> tuple[float, dict[str, float]]:
    """(seconds under the profiler, {operator: self CPU seconds}) from a key_averages() table."""
    text = path.read_text()
    seconds = float(re.search(r"seconds under the profiler: ([\d.]+)", text).group(1))
    rows = {}
    for line in text.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) >= 7 and re.fullmatch(r"[\d.]+(s|ms|us|ns)", cells[2]):
            value, unit = re.fullmatch(r"([\d.]+)(s|ms|us|ns)", cells[2]).groups()
            rows[cells[0]] = float(value) * UNITS[unit]
    return seconds, rows


def by_kind(seconds: float, rows: dict[str, float]) -> dict[str, float]:
    kinds = {kind: sum(rows.get(name, 0.0) for name in names) for kind, names in KINDS.items()}
    kinds["rest"] = max(0.0, seconds - sum(kinds.values()))
    return {kind: round(value, 3) for kind, value in kinds.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = {}
    for folder in args.dirs:
        workload = json.loads((folder / "workload.json").read_text())["workload"] if (folder / "workload.json").exists() \
            else folder.name
        report[workload] = {system: by_kind(*read_table(folder / f"{system}.txt")) for system in ("ours", "vllm")}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#b0b0b0"]
    fig, axes = plt.subplots(len(report), 1, figsize=(8, 1.9 + 1.3 * len(report)), squeeze=False)
    for ax, (workload, systems) in zip(axes[:, 0], report.items()):
        labels = {"ours": "miniyaie", "vllm": "vLLM 0.32 (CPU)"}
        for y, (system, kinds) in enumerate(systems.items()):
            left = 0.0
            for (kind, value), color in zip(kinds.items(), colors):
                ax.barh(y, value, left=left, color=color, label=kind if y == 0 else None)
                if value > 0.6:
                    ax.text(left + value / 2, y, f"{value:.1f}", ha="center", va="center", fontsize=8, color="white")
                left += value
            ax.text(left, y, f"  {left:.1f} s", ha="left", va="center", fontsize=8)
        ax.set_yticks(range(len(systems)), [labels[s] for s in systems])
        ax.set_xlim(0, 1.1 * max(sum(kinds.values()) for kinds in systems.values()))
        ax.invert_yaxis()
        ax.set_title(f"{workload} workload: self CPU time by kind of work, under torch.profiler")
        ax.set_xlabel("seconds of the run (2 threads)")
    axes[0, 0].legend(loc="upper center", bbox_to_anchor=(0.5, -0.45 if len(report) == 1 else -0.35), ncol=5,
                      fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
