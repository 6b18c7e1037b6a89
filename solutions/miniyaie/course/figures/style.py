"""What every chapter figure shares: a colour-blind-safe palette (Okabe and Ito), fonts, saving."""

from __future__ import annotations

from pathlib import Path

# Okabe-Ito: distinguishable with every common colour-vision deficiency.
BLUE, ORANGE, GREEN, VERMILION = "#0072B2", "#E69F00", "#009E73", "#D55E00"
SKY, PURPLE, YELLOW, GREY = "#56B4E9", "#CC79A7", "#F0E442", "#BBBBBB"
LIGHT = "#EEEEEE"
WIDTH = 10  # inches: the layouts are drawn for it; the book's column shows ~0.55 of its pixels
DPI = 130

RC = {
    "font.size": 11, "axes.titlesize": 12.5, "axes.titleweight": "bold", "axes.labelsize": 11,
    "legend.fontsize": 10, "figure.titlesize": 13.5, "figure.titleweight": "bold",
    "axes.spines.top": False, "axes.spines.right": False,
}


def figure(height: float, **kwargs):
    """A figure of the book's width with the shared style."""
    import matplotlib.pyplot as plt

    plt.rcParams.update(RC)
    return plt.subplots(figsize=(WIDTH, height), **kwargs)


def box(ax, x, y, w, h, text, colour=LIGHT, edge="#333333", fontsize=10.5, **kwargs):
    """A rounded box with centred text (data coordinates); returns the patch."""
    from matplotlib.patches import FancyBboxPatch

    patch = FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08", facecolor=colour,
                           edgecolor=edge, linewidth=1.2, **kwargs)
    ax.add_patch(patch)
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize, wrap=False)
    return patch


def arrow(ax, start, end, colour="#333333", style="-|>", rad=0.0, **kwargs):
    from matplotlib.patches import FancyArrowPatch

    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=14, color=colour, linewidth=1.3,
                                 connectionstyle=f"arc3,rad={rad}", **kwargs))


def blank(ax, xlim, ylim):
    """An axis used as a drawing board: no ticks, no frame, fixed limits."""
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_axis_off()


def save(fig, path: Path) -> None:
    """PNG without the matplotlib version in its metadata (a new version alone changes nothing)."""
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
