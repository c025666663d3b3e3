"""Plots of simulated runs: a timeline per policy and the wasted work of each policy.

matplotlib is imported here only (Agg backend, no display needed), so the simulator itself
runs without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .runs import Run

# Jobs beyond this many are left out of a timeline: rows thinner than a pixel show nothing.
TIMELINE_JOBS = 120


def plot_runs(runs: Sequence[Run], path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    scheduled = [run for run in runs if run.attempts]
    rows = len(scheduled) + 1
    fig, axes = plt.subplots(rows, 1, figsize=(11, 2.6 * rows), squeeze=False)
    horizon = max((run.metrics.makespan for run in runs), default=1.0)
    for ax, run in zip(axes[:-1, 0], scheduled, strict=True):
        shown = min(len(run.jobs), TIMELINE_JOBS)
        for committed, colour in ((True, "tab:blue"), (False, "tab:red")):
            drawn = [a for a in run.attempts if a.job < shown and a.committed is committed]
            ax.barh(
                [a.job for a in drawn],
                [a.end - a.start for a in drawn],
                left=[a.start for a in drawn],
                height=0.8,
                color=colour,
            )
        m = run.metrics
        ratio = (f"{m.makespan_over_bound:.2f}x bound" if m.makespan_over_bound is not None
                 else f"{m.dropped} jobs dropped, no ratio to the bound")
        ax.set_title(
            f"{run.policy}: makespan {m.makespan:.0f}s ({ratio}), "
            f"wasted {100 * m.wasted_fraction:.1f}%, {m.failed_attempts} failed attempts",
            fontsize=9,
        )
        ax.set_xlim(0, horizon * 1.02)
        ax.axvline(run.bound.value, color="grey", linestyle="--", linewidth=0.8)
        ax.set_ylabel("job" if shown == len(run.jobs) else f"job (first {shown})", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0, 0].legend(
        handles=[
            Patch(color="tab:blue", label="committed attempt"),
            Patch(color="tab:red", label="failed attempt (work thrown away)"),
        ],
        loc="upper right",
        fontsize=7,
    )
    axes[-2, 0].set_xlabel("simulated seconds (dashed: lower bound on the makespan)", fontsize=8)
    bars = axes[-1, 0]
    names = [run.policy for run in runs]
    wasted = [run.metrics.wasted_seconds / 3600 for run in runs]
    colours = ["tab:red" if w > 0 else "tab:green" for w in wasted]
    bars.bar(names, wasted, color=colours)
    for i, run in enumerate(runs):
        bars.text(i, wasted[i], f"{100 * run.metrics.wasted_fraction:.1f}%", ha="center", va="bottom", fontsize=8)
    bars.set_ylabel("wasted slot-hours", fontsize=8)
    bars.set_title(f"wasted work per policy ({runs[0].workload}, seed {runs[0].seed})", fontsize=9)
    bars.tick_params(labelsize=8)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
