"""Figures of the regime map (heatmaps of Reserve–Occupy's ratio to each baseline, one panel per
baseline and eta, each cell marked with its regime) and of the timeout experiment."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import LogNorm

from .plots import _save

LABELS = {"nemo_in_order": "NeMo in_order", "nemo_weight_fifo": "NeMo weight_fifo",
          "verl_drop": "verl drop", "nemo_in_order/drop": "in_order, drop path (what-if)",
          "reserve_occupy/capacity+4": "RO, capacity B+4",
          "reserve_occupy/candidates+2": "RO, G+2 candidates"}
MARK = {"slot-bound": "S", "engine-bound": "E", "trainer-bound": "T"}
AXES = {"train_mult": "training cost ×", "concurrency": "concurrency per instance",
        "truncated": "share of responses at the cap", "filter_rate": "no-gradient rate"}
SLICES = {"hardware": ("train_mult", "concurrency"), "workload": ("truncated", "filter_rate"),
          "filter": ("train_mult", "filter_rate")}


def regime_map(result: dict, slice_name: str, path: str | Path,
               baselines: tuple[str, ...] = ("nemo_in_order", "nemo_weight_fifo",
                                             "verl_drop")) -> Path:
    xkey, ykey = SLICES[slice_name]
    cells = [c for c in result["cells"] if c["slice"] == slice_name]
    etas = sorted({c["eta"] for c in cells})
    xs = sorted({c[xkey] for c in cells})
    ys = sorted({c[ykey] for c in cells})
    fig, axes = plt.subplots(len(baselines), len(etas),
                             figsize=(2.6 * len(etas) + 1.2, 2.3 * len(baselines) + 0.8),
                             squeeze=False)
    norm = LogNorm(vmin=0.8, vmax=1.25)
    image = None
    for i, base in enumerate(baselines):
        for j, eta in enumerate(etas):
            ax = axes[i][j]
            grid = np.full((len(ys), len(xs)), np.nan)
            for c in cells:
                if c["eta"] != eta:
                    continue
                r = c["ratios"].get(base, {})
                if base == "nemo_in_order/drop" and c["filter_rate"] == 0:
                    r = c["ratios"].get("nemo_in_order", {})  # nothing to drop: same policy
                if "mean" not in r:
                    continue
                yi, xi = ys.index(c[ykey]), xs.index(c[xkey])
                grid[yi, xi] = r["mean"]
                dark = abs(np.log(r["mean"])) > 0.13
                ax.text(xi, yi, f"{r['mean']:.2f}\n{MARK[c['regime']]}", ha="center",
                        va="center", fontsize=7, color="white" if dark else "black")
            image = ax.imshow(np.clip(grid, 0.8, 1.25), cmap="RdBu", norm=norm,
                              origin="lower", aspect="auto")
            ax.set_xticks(range(len(xs)), [f"{x:g}" for x in xs], fontsize=7)
            ax.set_yticks(range(len(ys)), [f"{y:g}" for y in ys], fontsize=7)
            if i == 0:
                ax.set_title(f"η = {eta}", fontsize=10)
            if i == len(baselines) - 1:
                ax.set_xlabel(AXES[xkey], fontsize=8)
            if j == 0:
                ax.set_ylabel(f"RO ÷ {LABELS.get(base, base)}\n{AXES[ykey]}", fontsize=8)
    fig.suptitle(f"Reserve–Occupy ÷ baseline, steady-state effective throughput "
                 f"({slice_name} slice; blue: RO ahead; S/E/T: slot-, engine-, trainer-bound)",
                 fontsize=10)
    if image is not None:
        bar = fig.colorbar(image, ax=axes, shrink=0.6, label="ratio (clipped to 0.8–1.25)")
        ticks = [0.8, 0.9, 1.0, 1.1, 1.25]
        bar.set_ticks(ticks, labels=[f"{t:g}" for t in ticks])
        bar.ax.minorticks_off()
    return _save(fig, path)


def timeout_lines(payload: dict, path: str | Path) -> Path:
    """Three panels against the timeout: effective throughput and time per batch relative to no
    timeout (what it buys), and the L2 waste it causes."""
    cells = payload["cells"]
    workloads = list(dict.fromkeys(c["workload"] for c in cells))
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
    ticks: set[float] = set()
    for wname, ls in zip(workloads, ("-", "--")):
        for eta in sorted({c["eta"] for c in cells}):
            mine = [c for c in cells if c["workload"] == wname and c["eta"] == eta]
            base = next(c for c in mine if c["timeout_s"] is None)["runs"]
            pts = []
            for c in mine:
                if c["timeout_s"] is None:
                    continue
                runs = c["runs"]
                pts.append((c["timeout_s"],
                            np.mean([a["steady"] / b["steady"] for a, b in zip(runs, base)]),
                            np.mean([a["seconds_per_batch"] / b["seconds_per_batch"]
                                     for a, b in zip(runs, base)]),
                            100 * np.mean([r["l2"] for r in runs])))
            pts.sort()
            ticks.update(p[0] for p in pts)
            x = [p[0] for p in pts]
            label = f"{wname.split(' (')[0]}, η={eta}"
            for k, ax in enumerate(axes):
                ax.plot(x, [p[k + 1] for p in pts], ls, marker="o", label=label)
    axes[0].set_ylabel("effective throughput ÷ no timeout")
    axes[1].set_ylabel("seconds per batch ÷ no timeout")
    axes[2].set_ylabel("L2 waste, % of tokens")
    for ax in axes[:2]:
        ax.axhline(1.0, color="#999", lw=0.8)
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xticks(sorted(ticks), [f"{t:g}" for t in sorted(ticks)])
        ax.minorticks_off()
        ax.set_xlabel("stuck_timeout_s")
    axes[2].legend(fontsize=7)
    fig.suptitle("Reserve–Occupy's timeout: what it buys (left, middle) and what it wastes "
                 "(right)", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)
