"""The interval methods of the instrument (bench/instrument.py) compared on every committed grid it
ran: the generated block of docs/peers.md, "The interval: sign or signed-rank", computed from
docs/results/calibration.json, peers_compare.json, peers_filtering.json and peers_ranking.json
(their stored pair ratios; nothing is run). Per grid and headline comparison (issue 37's: the
A/A rows, Reserve-Occupy against NeMo-RL as shipped, ``nemo_in_order`` whole batch,
``verl_drop`` and eta 0, and whole batch against whole batch; of the ranking grid the rows that
are one of those): the median with its sign interval and the Hodges-Lehmann estimate with its
signed-rank interval, each with its exact coverage and half-width ((hi - lo) / 2, in ratio
units); per grid, how often each method calls an A/A comparison of the grid's number of pairs
resolved, estimated by ``instrument.false_positive_rate`` from (a) the grid's own A/A pair
ratios and (b) the A/A pair ratios of all four grids, each grid's divided by its own median
first. tests/runtime/test_instrument_wilcoxon.py renders the block again and compares it with
the page.

``python bench/interval_methods.py`` prints the block; ``--write`` puts it into the page."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench.cli import Parser  # noqa: E402
from bench.docblock import between, splice  # noqa: E402

import instrument  # noqa: E402
import peers_compare as peers  # noqa: E402

DOC = ROOT / "docs" / "peers.md"
BEGIN = "<!-- begin: interval-methods (generated) -->"
END = "<!-- end: interval-methods -->"
# (results file under docs/results/, the grid's name in the block)
GRIDS = (("calibration", "calibration"), ("peers_compare", "headline"),
         ("peers_filtering", "filtering"), ("peers_ranking", "ranking"))
TRIALS = 4000  # per false-positive rate: binomial standard error 0.47 % at a rate of 10 %
SEED = 0
METHODS = ("sign", "wilcoxon")  # the bootstrap's rate is in each grid's own table header


def load(root: Path = ROOT) -> dict[str, dict[str, Any]]:
    """The committed results of each grid of ``GRIDS``, by its name in the block."""
    return {name: json.loads((root / "docs" / "results" / f"{stem}.json").read_text())
            for stem, name in GRIDS}


def _headline_pairs() -> set[tuple[tuple[Any, ...], tuple[Any, ...]]]:
    return {(tuple(c["a"]), tuple(c["b"])) for c in peers.headline() + peers.filtering_headline()}


def headline_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The grid's A/A comparisons and those that are one of the headline comparisons (the same
    two configurations as one of ``peers.headline()`` or ``peers.filtering_headline()``)."""
    wanted = _headline_pairs()
    return [c for c in results["comparisons"] if c["aa"] or (
        (c["policy"], c["streaming"], c["refit"], c["eta"]), tuple(c["against_config"]))
        in wanted]


def aa_ratios(results: dict[str, Any]) -> list[float]:
    """The grid's A/A pair ratios (``peers_compare.aa_ratios``)."""
    return peers.aa_ratios(results["comparisons"], results["pairs"])


def pooled_aa(grids: dict[str, dict[str, Any]]) -> list[float]:
    """Every grid's A/A pair ratios, each grid's divided by its own median."""
    out: list[float] = []
    for results in grids.values():
        aa = aa_ratios(results)
        centre = median(aa)
        out += [r / centre for r in aa]
    return out


def _name(c: dict[str, Any]) -> str:
    mode = "stream" if c["streaming"] else "whole"
    if c["aa"]:
        return f"A/A: {c['policy']} {mode}, eta {c['eta']}"
    against = {"shipped": "NeMo-RL as shipped", "ref": "nemo_in_order whole"}.get(
        c["against"], c["against"])
    return f"{c['policy']} {mode} against {against}, eta {c['eta']}"


def compare(grids: dict[str, dict[str, Any]], level: float = instrument.LEVEL
            ) -> dict[str, Any]:
    """The block's numbers: ``rows`` (per grid and headline comparison, both intervals) and
    ``rates`` (per grid, each method's A/A false-positive rate from its own and the pooled
    A/A ratios)."""
    pool = pooled_aa(grids)
    rows, rates = [], []
    for grid, results in grids.items():
        for c in headline_rows(results):
            xs = c["trained"]["ratios"]
            s_lo, s_hi, s_cov = instrument.sign_interval(xs, level)
            w_lo, w_hi, w_cov = instrument.wilcoxon_interval(xs, level)
            rows.append({"grid": grid, "name": _name(c), "aa": c["aa"], "eta": c["eta"],
                         "pairs": len(xs),
                         "median": median(xs), "sign": (s_lo, s_hi), "sign_cover": s_cov,
                         "hl": instrument.hodges_lehmann(xs), "wilcoxon": (w_lo, w_hi),
                         "wilcoxon_cover": w_cov})
        aa = aa_ratios(results)
        n = max(len(c["trained"]["ratios"]) for c in results["comparisons"])
        rate = {"grid": grid, "pairs": n, "aa": len(aa)}
        for m in METHODS:
            rate[m] = (instrument.false_positive_rate(aa, n, m, level, TRIALS, SEED),
                       instrument.false_positive_rate(pool, n, m, level, TRIALS, SEED))
        rates.append(rate)
    return {"rows": rows, "rates": rates, "pooled": len(pool), "level": level}


def half_width(iv: tuple[float, float]) -> float:
    return (iv[1] - iv[0]) / 2


def _iv(x: float, iv: tuple[float, float]) -> str:
    return peers.interval_text(x, *iv)


def _pct(x: float) -> str:
    return f"{x:.1%}" if math.isfinite(x) else "inf"


def render(grids: dict[str, dict[str, Any]], level: float = instrument.LEVEL) -> str:
    """The generated block: a sentence of what it shows, the intervals, the A/A rates."""
    r = compare(grids, level)
    aa_rows = [x for x in r["rows"] if x["aa"]]
    se = math.sqrt((1 - level) * level / TRIALS)
    own = [x["wilcoxon"][0] for x in r["rates"]]
    pooled = [x["wilcoxon"][1] for x in r["rates"]]
    lines = [
        f"Trained tok/s ratios (the filtering grid's: useful trained tok/s) of each grid's "
        f"headline comparisons, {level:.0%} intervals; half-width: (hi - lo) / 2. "
        f"A/A half-width, sign / signed-rank: " + "; ".join(
            f"{x['grid']} ({x['pairs']} pairs"
            + (f", eta {x['eta']}" if sum(y["grid"] == x["grid"] for y in aa_rows) > 1 else "")
            + f") {_pct(half_width(x['sign']))} / {_pct(half_width(x['wilcoxon']))}"
            for x in aa_rows) + ". "
        f"A/A false-positive rate of the signed-rank interval at each grid's number of pairs: "
        f"{min(own):.1%}-{max(own):.1%} from the grids' own A/A ratios, "
        f"{min(pooled):.1%}-{max(pooled):.1%} from the pooled ones (nominal {1 - level:.0%}; "
        f"{TRIALS} trials each, seed {SEED}: binomial standard error {se:.2%} at the nominal "
        f"rate, the highest of the eight {(max(own + pooled) - (1 - level)) / se:+.1f} "
        f"standard errors from it).",
        "",
        "| grid | comparison | pairs | median [sign interval] | coverage | half-width "
        "| Hodges-Lehmann [signed-rank interval] | coverage | half-width |",
        "|---|---|---|---|---|---|---|---|---|"]
    for x in r["rows"]:
        lines.append(
            f"| {x['grid']} | {x['name']} | {x['pairs']} | {_iv(x['median'], x['sign'])} | "
            f"{x['sign_cover']:.1%} | {_pct(half_width(x['sign']))} | "
            f"{_iv(x['hl'], x['wilcoxon'])} | {x['wilcoxon_cover']:.1%} | "
            f"{_pct(half_width(x['wilcoxon']))} |")
    lines += ["",
              f"A/A comparisons called resolved (nominal {1 - level:.0%}), from the grid's own "
              f"A/A pair ratios and from the {r['pooled']} of all four grids (each grid's "
              f"divided by its own median; the calibration grid's are crossover pairs, the "
              f"others' alternate):",
              "",
              "| grid | pairs | its A/A ratios | sign: own / pooled "
              "| signed-rank: own / pooled |",
              "|---|---|---|---|---|"]
    for x in r["rates"]:
        lines.append(f"| {x['grid']} | {x['pairs']} | {x['aa']} | "
                     + " | ".join(f"{x[m][0]:.1%} / {x[m][1]:.1%}" for m in METHODS) + " |")
    return "\n".join(lines)


def doc_block(text: str) -> str:
    return between(text, BEGIN, END)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="interval_methods.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true",
                        help=f"put the block into {DOC.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    block = render(load())
    print(block)
    if args.write:
        splice(DOC, BEGIN, END, block)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
