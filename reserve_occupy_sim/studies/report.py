"""Tables of results: Markdown pipe tables, which read well in a terminal and paste into docs."""

from __future__ import annotations

from pathlib import Path

from runtime import atomic_io

from ..model.metrics import RunResult

RO = "reserve_occupy"


def markdown(headers: list[str], rows: list[list[object]]) -> str:
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    for row in cells[1:]:
        lines.append("| " + " | ".join(c.rjust(w) if _numeric(c) else c.ljust(w)
                                       for c, w in zip(row, widths)) + " |")
    return "\n".join(lines)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def _numeric(text: str) -> bool:
    return (text.replace(".", "", 1).replace("-", "", 1).replace("×", "").replace("%", "")
            .isdigit())


def comparison(results: list[RunResult]) -> str:
    """One row per (eta, policy): throughput, Reserve–Occupy's speed-up over it, waste, idle
    fractions, time per batch, the largest staleness trained and the length bias (mean trained
    ÷ mean admitted response length, and the KS distance of the two distributions). With reward
    filtering on, a column gives the no-gradient tokens: filtered (never trained) / trained with zero advantage."""
    ro = {r.grid_eta: r for r in results if r.policy == RO}
    etas = sorted({r.grid_eta for r in results})
    filtering = any(r.waste_filtered_tokens or r.no_gradient_tokens for r in results)
    rows = []
    for eta in etas:
        for r in results:
            if r.grid_eta != eta:
                continue
            base = ro.get(eta)
            speedup = f"{base.throughput / r.throughput:.2f}×" if base and r.throughput else "-"
            total = (r.tokens_trained + r.waste_l2_tokens + r.waste_l3_tokens
                     + r.waste_filtered_tokens)
            row = [eta, r.label, round(r.throughput), speedup,
                   f"{r.waste_l2_tokens / total:.1%}" if total else "-",
                   f"{r.waste_l3_tokens / total:.1%}" if total else "-"]
            if filtering:
                row.append(f"{r.waste_filtered_tokens / total:.1%} / "
                           f"{r.no_gradient_tokens / total:.1%}" if total else "-")
            row += [f"{r.trainer_idle:.0%}", f"{r.rollout_idle:.0%}",
                    round(r.seconds_per_batch), r.max_staleness,
                    f"{r.length_ratio:.2f} / {r.length_ks:.2f}"]
            rows.append(row)
            if r.eta is None or r.eta != eta:  # a reference row: say which bound it had
                rows[-1][1] += " (η=0)" if r.eta == 0 else (" (no bound)" if r.eta is None
                                                             else f" (η={r.eta})")
    headers = ["η", "policy", "tok/s", "RO ÷ it", "L2 waste", "L3 waste"]
    if filtering:
        headers.append("no gradient: filtered / trained")
    headers += ["trainer idle", "rollout idle", "s/batch", "max staleness",
                "length bias: ratio / KS"]
    return markdown(headers, rows)


def merge_tables(path: Path, tables: dict[str, str]) -> None:
    """Write the tables to ``path`` (docs/results/tables.md: one ``## name`` section each),
    keeping the sections of studies not rerun this time."""
    merged: dict[str, str] = {}
    if path.exists():
        for part in ("\n" + path.read_text()).split("\n## ")[1:]:
            name, _, body = part.partition("\n\n")
            merged[name.strip()] = body.strip()
    merged.update(tables)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_io.write_text(path, "\n\n".join(f"## {k}\n\n{v}" for k, v in merged.items()) + "\n")
