"""The streaming study's output: its Markdown tables (the ``streaming-*`` blocks of
docs/sim/streaming.md, ``BLOCKS``), the page's generated blocks rewritten (``write_page``) and
its figure, drawn from the payload ``streaming_compute.run`` returns; nothing here simulates.
"""

from __future__ import annotations

from pathlib import Path

from runtime import atomic_io

from .streaming_compute import (DROPPING, FRAMEWORKS, IN_ORDER_AS_SHIPPED, MAP_PEERS, MAP_RO,
                                TARGET_SHIPPED, _cell_key, _mean)
from .streaming_window import evidence, long_min


PAGE = Path("docs/sim/streaming.md")


# --------------------------------------------------------------------------- tables ---------

def _f(x: float, fmt: str = ".3f") -> str:
    return "—" if x != x else format(x, fmt)


def table(payload: dict) -> str:
    lines = ["| η | framework | trainer | engine | tok/s | ÷ NeMo in_order as shipped "
             "| ÷ bound | max staleness | length ratio |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in payload["rows"]:
        stalled = f" ({r['stalled']} stalled)" if r["stalled"] else ""
        lines.append(f"| {r['eta']} | {r['framework']}{stalled} | {r['trainer']} | "
                     f"{r['engine']} | {_f(r['steady'], '.0f')} | {_f(r['vs_reference'])} | "
                     f"{_f(r['of_bound'])} | {r['max_staleness']} | "
                     f"{_f(r['length_ratio'])} |")
    return "\n".join(lines)


def bound_table(payload: dict) -> str:
    lines = ["| η | trainer | engine | upper bound tok/s | binding terms | best schedule tok/s "
             "(÷ bound) | schedules that won |", "|---|---|---|---|---|---|---|"]
    keys = sorted({(b["eta"], b["trainer"], b["engine"]) for b in payload["bounds"]})
    for eta, trainer, engine in keys:
        bs = [b for b in payload["bounds"]
              if (b["eta"], b["trainer"], b["engine"]) == (eta, trainer, engine)]
        binding = sorted({b["notes"].split(" ", 2)[1] for b in bs})
        winners = sorted({b["schedule_policy"] for b in bs})
        up, sched = _mean(b["upper"] for b in bs), _mean(b["schedule"] for b in bs)
        frac = _mean(b["schedule"] / b["upper"] for b in bs)
        lines.append(f"| {eta} | {trainer} | {engine} | {up:.0f} | {'/'.join(binding)} | "
                     f"{sched:.0f} ({frac:.3f}) | {'; '.join(winners)} |")
    return "\n".join(lines)


def sweep_table(payload: dict) -> str:
    keys = sorted({r["framework"] for r in payload["sweep"]})
    chunks = sorted({r["chunk_groups"] for r in payload["sweep"]})
    lines = ["| chunk groups | " + " | ".join(f"{k} tok/s" for k in keys) + " |",
             "|---|" + "---|" * len(keys)]
    for c in chunks:
        cells = []
        for k in keys:
            vals = [r["steady"] for r in payload["sweep"]
                    if r["framework"] == k and r["chunk_groups"] == c and "steady" in r]
            cells.append(_f(_mean(vals), ".0f"))
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def targets_table(payload: dict) -> str:
    lines = ["| target | mean | min over seeds | goal | met |", "|---|---|---|---|---|"]
    for t in payload["targets"]:
        goal = "—" if t["goal"] is None else f"≥ {t['goal']:.2f}"
        met = "—" if t["met"] is None else ("yes" if t["met"] else "no")
        lines.append(f"| {t['target']} | {_f(t['mean'])} | {_f(t['min'])} | {goal} | {met} |")
    return "\n".join(lines)


BLOCKS = {"streaming-table": table, "streaming-bound": bound_table,
          "streaming-sweep": sweep_table, "streaming-targets": targets_table}


def regimes_block(payload: dict) -> str:
    """The regime-map table of a payload that has one (``--regimes``)."""
    return regimes_table(payload["regimes"])


def regimes_table(reg: dict) -> str:
    lines = ["| cells | RO stream ÷ in_order as shipped: min (mean) | cells ≥ 0.99 "
             "| RO stream in-flight ÷ in_order as shipped: min (mean) | cells ≥ 0.99 |",
             "|---|---|---|---|---|"]
    for eta in sorted({c["eta"] for c in reg["cells"]}):
        cs = [c for c in reg["cells"] if c["eta"] == eta]
        out = [f"η = {eta}: {len(cs)}"]
        for k in ("RO stream", "RO stream in-flight"):
            mins = [c["ratios"][k]["min"] for c in cs]
            means = [c["ratios"][k]["mean"] for c in cs]
            ok = sum(1 for m in mins if m >= TARGET_SHIPPED)
            out += [f"{min(mins):.3f} ({_mean(means):.3f})", f"{ok} of {len(cs)}"]
        lines.append("| " + " | ".join(out) + " |")
    worst = sorted(reg["cells"], key=lambda c: c["ratios"]["RO stream in-flight"]["min"])[:5]
    lines += ["", "| worst cells (in-flight) | η | train × | concurrency | truncated | filter "
              "| RO stream in-flight ÷ in_order (min) |", "|---|---|---|---|---|---|---|"]
    for c in worst:
        lines.append(f"| {c['slice']} | {c['eta']} | {c['train_mult']:g} | {c['concurrency']} | "
                     f"{c['truncated']:g} | {c['filter_rate']:g} | "
                     f"{c['ratios']['RO stream in-flight']['min']:.3f} |")
    return "\n".join(lines)


def _bounded(key: str) -> bool:
    """Whether the row's rule promises staleness <= eta for every trajectory it trains."""
    from reserve_occupy_peers import POLICIES

    policy = next(fw.policy for fw in FRAMEWORKS if fw.key == key)
    return POLICIES[policy].bounded


def _drops(key: str) -> bool:
    """Whether the row's rule discards generated work for its age (``DROPPING``)."""
    return next(fw.policy for fw in FRAMEWORKS if fw.key == key) in DROPPING


def _ro_length(c: dict) -> float:
    """RO stream in-flight's length ratio in a cell (mean over the seeds that finished)."""
    return _mean(r["length_ratio"] for r in c["ro_in_flight"] if r)


def regimes_peers_block(payload: dict) -> str:
    """The regime map's peers table of a payload that has one (``--regimes`` with peers)."""
    return regimes_peers_table(payload.get("regimes", {"cells": []}))


def regimes_peers_table(reg: dict) -> str:
    """RO stream in-flight ÷ each peer of ``MAP_PEERS`` over the cells where it ran, the peer's
    length ratio and waste beside Reserve–Occupy's, then the target over every bounded peer:
    a cell meets it when RO stream in-flight is >= TARGET_SHIPPED x every bounded row the cell
    ran (NeMo in_order as shipped included), min over seeds."""
    cells = [c for c in reg["cells"] if c.get("peers")]
    total = len(reg["cells"])
    if not cells:
        return f"No peer has run in the regime map's {total} cells yet."
    lines = ["| peer (RO stream in-flight ÷ it) | bounded | cells run | min (mean) | cells ≥ "
             f"{TARGET_SHIPPED} | stalled runs | its length ratio ÷ RO's: mean [min] | its waste "
             "(dropped or aborted tokens) | trajectories it drops per run | max staleness |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for key in MAP_PEERS:
        ps = [c["peers"][key] for c in cells if key in c["peers"]]
        if not ps:
            continue
        mins = [p["min"] for p in ps if p["min"] == p["min"]]
        lengths = [c["peers"][key]["length_ratio"] / _ro_length(c) for c in cells
                   if key in c["peers"] and c["peers"][key]["length_ratio"] == c["peers"][key][
                       "length_ratio"] and _ro_length(c)]
        ok = sum(1 for m in mins if m >= TARGET_SHIPPED)
        fin = [p for p in ps if p["min"] == p["min"]]  # a seed finished (not every run stalled)
        lines.append(
            f"| {key} | {'yes' if _bounded(key) else 'no'} | {len(ps)} | "
            f"{_f(min(mins, default=float('nan')))} ({_f(_mean(p['mean'] for p in fin))}) | "
            f"{ok} of {len(mins)} | {sum(p['stalled'] for p in ps)} | "
            f"{_f(_mean(lengths))} [{_f(min(lengths, default=float('nan')))}] | "
            f"{_f(100 * _mean(p['waste'] for p in fin), '.1f')} % | "
            f"{_f(_mean(p['dropped'] for p in fin), '.1f')} | "
            f"{max(p['max_staleness'] for p in ps)} |")
    ro = [r for c in cells for r in c["ro_in_flight"] if r]
    lines.append(f"| *RO stream in-flight itself* | yes | {len(cells)} | — | — | "
                 f"{sum(1 for c in cells for r in c['ro_in_flight'] if not r)} | "
                 f"its own: {_f(_mean(r['length_ratio'] for r in ro))} "
                 f"[{_f(min((r['length_ratio'] for r in ro), default=float('nan')))}] | "
                 f"{_f(100 * _mean(r['waste'] for r in ro), '.1f')} % | "
                 f"{_f(_mean(r['dropped'] for r in ro), '.1f')} | "
                 f"{max((r['max_staleness'] for r in ro), default=0)} |")
    worst = []
    for c in cells:
        vs = [(c["ratios"][MAP_RO]["min"], IN_ORDER_AS_SHIPPED)]
        vs += [(p["min"], k) for k, p in c["peers"].items() if _bounded(k)]
        vs = [(v, k) for v, k in vs if v == v]
        if not vs:  # every run of the cell stalled
            continue
        worst.append((min(vs), c, len([k for k in c["peers"] if _bounded(k)])))
    ok = sum(1 for (v, _k), _c, _n in worst if v >= TARGET_SHIPPED)
    keep = []  # the same over the bounded rows that drop nothing
    for c in cells:
        vs = [c["ratios"][MAP_RO]["min"]] + [p["min"] for k, p in c["peers"].items()
                                             if _bounded(k) and not _drops(k)]
        vs = [v for v in vs if v == v]
        if vs:
            keep.append(min(vs))
    free = ", ".join([IN_ORDER_AS_SHIPPED] + [k for k in MAP_PEERS
                                              if _bounded(k) and not _drops(k)])
    etas = sorted({c["eta"] for c in cells})
    lines += ["", f"Every bounded peer: RO stream in-flight ≥ {TARGET_SHIPPED} × every bounded "
              f"row a cell ran (NeMo in_order as shipped included; min over seeds) in **{ok} of "
              f"{len(cells)}** cells with peers (η {', '.join(map(str, etas))}; the map has "
              f"{total}). Against the bounded rows that drop nothing ({free}): "
              f"**{sum(1 for v in keep if v >= TARGET_SHIPPED)} of {len(keep)}**, lowest "
              f"{_f(min(keep, default=float('nan')))}.", "",
              "| worst cells | η | train × | concurrency | truncated | filter | bounded peers "
              "run | lowest RO stream in-flight ÷ a bounded peer (min) | that peer |",
              "|---|---|---|---|---|---|---|---|---|"]
    for (v, k), c, n in sorted(worst, key=lambda w: w[0][0])[:5]:
        lines.append(f"| {c['slice']} | {c['eta']} | {c['train_mult']:g} | {c['concurrency']} | "
                     f"{c['truncated']:g} | {c['filter_rate']:g} | {n + 1} | {v:.3f} | {k} |")
    return "\n".join(lines)


# Why Reserve–Occupy is below a row (``loss_cause``), checked in this order; each reads only the
# stored cell (the row's runs and Reserve–Occupy's), so the page's classification is computed.
# (Until the filtered cells were measured over the same prompts, ``streaming_compute.
# FILTERED_MEASURE``, a cause "trains no-gradient" stood before "drops": a rule that trains its
# no-gradient groups covered another stretch of the workload in the same batches. That was the
# measure's, not the rule's, and is gone with it.)
LOSS_CAUSES = (
    ("past η", "trains trajectories older than η: not bounded per trajectory"),
    ("drops, shorter", "drops or aborts generated work (≥ 1 % of its tokens) and trains shorter "
                       "answers than Reserve–Occupy (length ratio ÷ RO's < 0.97)"),
    ("drops", "drops or aborts generated work (≥ 1 % of its tokens), answers not shorter"),
    ("window edge", "none of the above; run again over more batches ([window edges]"
                    "(#window-edges): the same cells, seeds and rows), it is ≥ 0.99 on every "
                    "seed over the longest run"),
    ("seed spread", "none of the above; the cell mean is ≥ 0.99, one seed below"),
    ("unexplained", "none of the above; the cell mean is below 0.99"),
)
DROP_SHARE = 0.01  # a row "drops" when at least this share of its generated tokens is thrown away


def loss_cause(c: dict, key: str, window: dict | None = None) -> str | None:
    """Why RO stream in-flight is below ``key`` (min over seeds < TARGET_SHIPPED) in cell ``c``
    of the streaming regime map: the first of ``LOSS_CAUSES`` that the stored runs show, or None
    where it is not below. ``key`` is a peer of ``MAP_PEERS`` or the in_order row; ``window`` is
    the cell's evidence over more batches (``streaming_window.evidence``), if any."""

    from ..model.metrics import SHORT_BIAS

    if key == IN_ORDER_AS_SHIPPED:
        r, p = c["ratios"][MAP_RO], None
    else:
        r = p = c["peers"][key]
    if not r["min"] == r["min"] or r["min"] >= TARGET_SHIPPED:  # nan: every run stalled
        return None
    if p is not None and p["max_staleness"] > c["eta"]:
        return "past η"
    drops = p is not None and p["waste"] >= DROP_SHARE
    if drops and p["length_ratio"] < SHORT_BIAS * _ro_length(c):
        return "drops, shorter"
    if drops:
        return "drops"
    longer = long_min(window, key)
    if longer is not None and longer[1] >= TARGET_SHIPPED:
        return "window edge"
    return "seed spread" if r["mean"] >= TARGET_SHIPPED else "unexplained"


def strictly_bounded(reg: dict) -> list[str]:
    """The rows bounded per trajectory in the map: the rule promises it (``Policy.bounded``)
    and no cell's run trained a trajectory older than its η (the in_order row first; a peer that
    ran in no cell is not listed)."""
    cells = [c for c in reg["cells"] if c.get("peers")]
    out = [IN_ORDER_AS_SHIPPED]
    for k in MAP_PEERS:
        ran = [c for c in cells if k in c["peers"]]
        if ran and _bounded(k) and all(c["peers"][k]["max_staleness"] <= c["eta"] for c in ran):
            out.append(k)
    return out


def regimes_losses(reg: dict) -> dict:
    """Per row (in_order, then ``MAP_PEERS``): the cells RO stream in-flight is below it, by
    cause, its largest trained staleness and the cells where it exceeds η; and the target counted
    over the strictly bounded rows, and over those of them that drop nothing."""
    cells = [c for c in reg["cells"] if c.get("peers")]
    ev = evidence(reg)
    rows = {}
    for key in (IN_ORDER_AS_SHIPPED,) + MAP_PEERS:
        mine = [c for c in cells if key == IN_ORDER_AS_SHIPPED or key in c["peers"]]
        causes = {name: 0 for name, _ in LOSS_CAUSES}
        for c in mine:
            cause = loss_cause(c, key, ev.get(_cell_key(c)))
            if cause is not None:
                causes[cause] += 1
        stale = [(c["peers"][key]["max_staleness"], c["eta"]) for c in mine
                 if key != IN_ORDER_AS_SHIPPED]
        rows[key] = {"cells": len(mine), "below": sum(causes.values()), "causes": causes,
                     "max_staleness": max((s for s, _ in stale), default=None),
                     "past_eta_cells": sum(1 for s, e in stale if s > e)}
    strict = strictly_bounded(reg)
    free = [k for k in strict if k == IN_ORDER_AS_SHIPPED or not _drops(k)]

    def met(keys: list[str]) -> int:
        return sum(1 for c in cells if all(loss_cause(c, k) is None for k in keys
                                           if k == IN_ORDER_AS_SHIPPED or k in c["peers"]))

    def judged(c: dict, k: str) -> bool:
        """Met over the longest run stored for (cell, row) where the cell was run again (a
        row ahead there counts against, whatever the map's 60 batches said), else the map's."""
        longer = long_min(ev.get(_cell_key(c)), k)
        return loss_cause(c, k) is None if longer is None else longer[1] >= TARGET_SHIPPED

    def met_longest(keys: list[str]) -> int:
        return sum(1 for c in cells if all(judged(c, k) for k in keys
                                           if k == IN_ORDER_AS_SHIPPED or k in c["peers"]))
    return {"rows": rows, "cells": len(cells), "strict": strict, "strict_met": met(strict),
            "strict_free": free, "strict_free_met": met(free), "window": len(ev),
            "strict_met_longest": met_longest(strict),
            "strict_free_met_longest": met_longest(free)}


def regimes_losses_block(payload: dict) -> str:
    """The regime map's losses by cause of a payload that has peers in its map."""
    return regimes_losses_table(payload.get("regimes", {"cells": []}))


def regimes_losses_table(reg: dict) -> str:
    if not any(c.get("peers") for c in reg["cells"]):
        return "No peer has run in the regime map yet."
    got = regimes_losses(reg)
    names = [name for name, _ in LOSS_CAUSES]
    lines = ["| row (RO stream in-flight below it: min over seeds < "
             f"{TARGET_SHIPPED}) | strictly bounded | cells below | "
             + " | ".join(names) + " | its max trained staleness | cells it trains past η |",
             "|---|---|---|" + "---|" * len(names) + "---|---|"]
    for key, row in got["rows"].items():
        if not row["cells"]:  # a peer the map has not run
            continue
        stale = "—" if row["max_staleness"] is None else str(row["max_staleness"])
        past = "—" if row["max_staleness"] is None else str(row["past_eta_cells"])
        lines.append(f"| {key} | {'yes' if key in got['strict'] else 'no'} | "
                     f"{row['below']} of {row['cells']} | "
                     + " | ".join(str(row["causes"][n]) for n in names)
                     + f" | {stale} | {past} |")
    lines += ["", "Causes, the first that applies: "
              + "; ".join(f"*{name}*: {what}" for name, what in LOSS_CAUSES) + ".", "",
              f"Strictly bounded per trajectory (the rule promises it and no cell trained past "
              f"η): {', '.join(got['strict'])}. RO stream in-flight ≥ {TARGET_SHIPPED} × every "
              f"one of them in **{got['strict_met']} of {got['cells']}** cells; against those "
              f"that drop nothing ({', '.join(got['strict_free'])}): "
              f"**{got['strict_free_met']} of {got['cells']}**."]
    if got["window"]:
        where = ("every cell" if got["window"] == got["cells"] else
                 f"the {got['window']} cells that have one, over the map's in the others")
        lines[-1] += (f" Judged over the longest run stored ([window edges](#window-edges): "
                      f"{where}): **{got['strict_met_longest']}** and "
                      f"**{got['strict_free_met_longest']}** of {got['cells']}.")
    return "\n".join(lines)


# --------------------------------------------------------------------------- output ---------

def write_page(page: Path, blocks: dict[str, str]) -> None:
    """Replace each ``<!-- BEGIN generated:NAME -->`` .. ``END`` block of ``page``."""
    text = page.read_text()
    for name, body in blocks.items():
        begin, end = f"<!-- BEGIN generated:{name} -->", f"<!-- END generated:{name} -->"
        i, j = text.find(begin), text.find(end)
        if i < 0 or j < i:
            raise ValueError(f"{page}: no generated block {name!r}")
        text = text[: i + len(begin)] + "\n" + body + "\n" + text[j:]
    atomic_io.write_text(page, text)


def figure(payload: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows_ = [r for r in payload["rows"]]
    keys = [fw["key"] for fw in payload["frameworks"]]
    etas = payload["setting"]["etas"]
    fig, ax = plt.subplots(figsize=(11, 4.2))
    width = 0.8 / len(keys)
    for i, k in enumerate(keys):
        vals = [next(r["steady"] for r in rows_ if r["eta"] == e and r["framework"] == k)
                for e in etas]
        ax.bar([e + (i - len(keys) / 2) * width for e in etas], vals, width, label=k)
    for e in etas:
        ups = [b["upper"] for b in payload["bounds"] if b["eta"] == e and b["trainer"] == "stream"]
        ax.hlines(_mean(ups), e - 0.42, e + 0.42, colors="k", linestyles="dashed")
    ax.set_xticks(etas, [f"η = {e}" for e in etas])
    ax.set_ylabel("steady-state effective tok/s")
    ax.set_title("Frameworks as shipped; dashed: clairvoyant upper bound, streaming trainer")
    ax.legend(fontsize=7, ncol=4, loc="lower right")
    fig.tight_layout()
    atomic_io.savefig(fig, path, dpi=110)
    plt.close(fig)
