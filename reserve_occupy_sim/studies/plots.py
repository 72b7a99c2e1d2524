"""PNG figures in the style of the source's: per-batch staleness composition, throughput bars
with L2/L3 waste and speed-up labels, Reserve–Occupy against the unbounded ceiling, and the
workload's length distributions. Matplotlib with the Agg backend (no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from runtime import atomic_io  # noqa: E402

from ..model.metrics import RunResult  # noqa: E402
from ..model.workload import Workload  # noqa: E402

RO = "reserve_occupy"
GREEN = "#2e7d32"
POLICY_COLORS = {
    "reserve_occupy": "#1f4e9c", "nemo_in_order": "#7fa7d9", "nemo_weight_fifo": "#a9c6e8",
    "verl_drop": "#e0893a", "trl": "#d9b23a", "roll": "#9b6fb5", "areal": "#5aa38c",
    "synchronous": "#9e9e9e", "unbounded": "#444444",
}


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_io.savefig(fig, path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


def staleness_composition(results: list[RunResult], path: str | Path) -> Path:
    """One panel per eta: a bar per batch, stacked by the staleness of its trajectories."""
    n = len(results)
    cols = 3 if n > 2 else n
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.0 * rows), sharey=True,
                             squeeze=False)
    top = max((len(c) for r in results for c in r.staleness_counts), default=1)
    colors = plt.get_cmap("Blues")(np.linspace(0.95, 0.3, max(top, 2)))
    for ax, res in zip(axes.flat, results):
        counts = np.zeros((len(res.staleness_counts), top))
        for i, row in enumerate(res.staleness_counts):
            counts[i, : len(row)] = row
        x = np.arange(1, len(counts) + 1)
        bottom = np.zeros(len(counts))
        for s in range(top):
            if counts[:, s].any():
                ax.bar(x, counts[:, s], bottom=bottom, width=1.0, color=colors[s],
                       edgecolor="none", label=f"staleness {s}")
            bottom += counts[:, s]
        ax.set_title(f"η = {res.eta}: max staleness seen {res.max_staleness}", fontsize=10)
        ax.set_xlim(0.5, len(counts) + 0.5)
        ax.set_ylim(0, res.batch_size * res.group_size * 1.1)
        ax.set_xlabel("training batch")
        ax.axhline(res.batch_size * res.group_size, color="#999", lw=0.6, ls=":")
    for ax in axes[:, 0]:
        ax.set_ylabel("trajectories")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    handles = [Patch(color=colors[s], label=f"staleness {s}") for s in range(top)]
    fig.legend(handles=handles, loc="lower center", ncol=min(top, 6), frameon=False,
               bbox_to_anchor=(0.5, -0.04))
    fig.suptitle("Reserve–Occupy: staleness composition of every training batch", y=1.0)
    fig.tight_layout()
    return _save(fig, path)


def throughput_bars(results: list[RunResult], path: str | Path, title: str = "") -> Path:
    """Grouped by eta: effective throughput (solid, value on top), L2 and L3 waste stacked above
    (hatched), and Reserve–Occupy's speed-up over each other policy in green."""
    etas = sorted({r.grid_eta for r in results})
    policies = list(dict.fromkeys(r.policy for r in results))
    by = {(r.policy, r.grid_eta): r for r in results}
    width = 0.8 / len(policies)
    fig, ax = plt.subplots(figsize=(1.5 + 0.45 * len(policies) * len(etas), 4.6))
    peak = max(r.throughput + r.waste_l2_rate + r.waste_l3_rate for r in results)
    for j, eta in enumerate(etas):
        ro = by.get((RO, eta))
        for i, name in enumerate(policies):
            r = by.get((name, eta))
            if r is None:
                continue
            x = j + (i - (len(policies) - 1) / 2) * width
            color = POLICY_COLORS.get(name, "#777")
            ax.bar(x, r.throughput, width * 0.92, color=color, label=r.label if j == 0 else None)
            ax.bar(x, r.waste_l2_rate, width * 0.92, bottom=r.throughput, color="white",
                   edgecolor=color, hatch="xxx", lw=0.5)
            ax.bar(x, r.waste_l3_rate, width * 0.92, bottom=r.throughput + r.waste_l2_rate,
                   color="white", edgecolor=color, hatch="///", lw=0.5)
            top = r.throughput + r.waste_l2_rate + r.waste_l3_rate
            ax.text(x, r.throughput - peak * 0.01, f"{r.throughput:.0f}", ha="center",
                    va="top", fontsize=6.5, rotation=90, color="white")
            if ro is not None and name != RO and r.throughput > 0:
                ax.text(x, top + peak * 0.015, f"{ro.throughput / r.throughput:.2f}×",
                        ha="center", va="bottom", fontsize=7, color=GREEN, rotation=90)
    ax.set_xticks(range(len(etas)), [f"η = {e}" for e in etas])
    ax.set_ylabel("tokens / s")
    ax.set_ylim(0, peak * 1.14)
    handles, labels = ax.get_legend_handles_labels()
    handles += [Patch(facecolor="white", edgecolor="#555", hatch="xxx", label="L2 waste"),
                Patch(facecolor="white", edgecolor="#555", hatch="///", label="L3 waste")]
    ax.legend(handles=handles, fontsize=7.5, ncol=6, loc="upper center", frameon=False,
              bbox_to_anchor=(0.5, -0.08))
    ax.set_title(title or "Effective throughput (solid), waste (hatched); green: Reserve–Occupy "
                          "speed-up", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def ceiling_bars(ro: list[RunResult], ceiling: RunResult, path: str | Path) -> Path:
    """Reserve–Occupy at each eta against the unbounded-staleness run (a horizontal line)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    etas = [r.eta for r in ro]
    vals = [r.throughput for r in ro]
    ax.bar(etas, vals, 0.6, color=POLICY_COLORS[RO], label="Reserve–Occupy")
    ax.axhline(ceiling.throughput, color=POLICY_COLORS["unbounded"], ls="--", lw=1,
               label=f"unbounded staleness ({ceiling.throughput:.0f} tok/s, "
                     f"max staleness {ceiling.max_staleness})")
    for e, v in zip(etas, vals):
        ax.text(e, v * 0.96, f"{v / ceiling.throughput:.0%}", ha="center", va="top", fontsize=8,
                color="white")
    ax.set_xticks(etas, [f"η = {e}" for e in etas])
    ax.set_ylabel("tokens / s")
    ax.set_ylim(0, max(vals + [ceiling.throughput]) * 1.18)
    ax.legend(fontsize=8, frameon=False, loc="upper left")
    ax.set_title("Reserve–Occupy against the unbounded-staleness ceiling", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def workload_lengths(workload: Workload, path: str | Path) -> Path:
    prompts = np.array([g.prompt_len for g in workload.groups])
    resp = np.array([r for g in workload.groups for r in g.response_lens])
    fig, (a, b) = plt.subplots(1, 2, figsize=(9.6, 3.2))
    a.hist(prompts, bins=40, color="#7fa7d9")
    a.set_xlabel("prompt tokens")
    a.set_ylabel("groups")
    b.hist(resp, bins=80, color="#1f4e9c")
    b.set_xlabel("response tokens")
    b.set_ylabel("trajectories")
    at_cap = (resp == resp.max()).mean()
    b.set_title(f"{at_cap:.1%} at the cap {resp.max()}", fontsize=9)
    fig.suptitle(f"Workload {workload.name}: {len(workload)} groups of {workload.group_size}",
                 fontsize=10)
    fig.tight_layout()
    return _save(fig, path)
