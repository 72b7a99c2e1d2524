"""The numbers in docs/ are generated: each table sits between markers in its page,

    <!-- BEGIN generated:exp2_throughput -->
    | η | policy | ... |
    <!-- END generated:exp2_throughput -->

and this module owns the map from a block's name to the results file it is rendered from. A
study calls ``update`` after it writes its results, so the make target that computes a table
also rewrites it in every page that shows it; ``tests/sim/test_docs_tables.py`` fails when a
page and its results disagree (``stale``), as ``tests/core/test_machine.py`` does for
spec/state-machine.md.

A block is rendered from one of two kinds of source in ``docs/results/``:
- ``section``: a named section (``## name``) of ``tables.md``, the tables a study printed;
- ``from_json``: a results JSON passed to a function that returns the Markdown.

A new study adds its blocks with ``register`` (at import of this module, so the test sees
them): a ``from_json`` render function may be named as ``"package.module:function"``, imported
only when the block is rendered, so this module imports no study.

``python -m reserve_occupy_sim.studies.pages`` rewrites every block from the committed results (no
simulation runs); ``--check`` only lists the stale ones (exit 1 if any).
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Union

from runtime import atomic_io

from .report import markdown

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
DOCS = ROOT / "docs"
TABLES = "tables.md"

BLOCK = re.compile(r"<!-- BEGIN generated:(?P<name>[\w.-]+) -->\n(?P<body>.*?)"
                   r"<!-- END generated:(?P<end>[\w.-]+) -->", re.DOTALL)
MARKER = re.compile(r"<!-- (BEGIN|END) generated:([\w.-]+) -->")

Render = Union[Callable[[dict], str], str]


class PageError(ValueError):
    """A page's markers are malformed, name a block nobody registered, or a results source is
    missing; the message names the page, the block and the file."""


@dataclass(frozen=True)
class Block:
    name: str
    target: str  # the make target (or command) that recomputes the results
    source: str  # the file in the results folder
    section: str | None = None  # for a tables.md section
    render: Render | None = None  # for a results JSON

    def text(self, results_dir: Path = RESULTS) -> str:
        path = Path(results_dir) / self.source
        if not path.exists():
            raise PageError(f"block {self.name!r}: no results file {path}")
        if self.section is not None:
            return _section(path, self.section, self.name).strip("\n") + "\n"
        render = self.render
        if isinstance(render, str):
            module, _, func = render.partition(":")
            render = getattr(importlib.import_module(module), func)
        return render(json.loads(path.read_text(encoding="utf-8"))).strip("\n") + "\n"


BLOCKS: dict[str, Block] = {}


def register(block: Block) -> Block:
    if block.name in BLOCKS and BLOCKS[block.name] != block:
        raise PageError(f"block {block.name!r} is registered twice")
    if (block.section is None) == (block.render is None):
        raise PageError(f"block {block.name!r}: give a tables.md section or a render function")
    BLOCKS[block.name] = block
    return block


def section(name: str, target: str, of: str | None = None) -> Block:
    """A block that is the ``## of`` section (default: ``name``) of tables.md."""
    return register(Block(name, target, TABLES, section=of or name))


def from_json(name: str, target: str, source: str, render: Render) -> Block:
    return register(Block(name, target, source, render=render))


def _section(path: Path, name: str, block: str) -> str:
    for part in ("\n" + path.read_text(encoding="utf-8")).split("\n## ")[1:]:
        title, _, body = part.partition("\n\n")
        if title.strip() == name:
            return body
    raise PageError(f"block {block!r}: {path} has no section '## {name}'")


def fed_by(*sources: str) -> list[str]:
    """The names of the blocks rendered from these results files."""
    return [b.name for b in BLOCKS.values() if b.source in sources]


# --------------------------------------------------------------------------- pages --------

def blocks(text: str, page: str = "<page>") -> list[tuple[str, str]]:
    """(name, body) of every generated block, in order; malformed markers are an error."""
    found = [(m.group("name"), m.group("body")) for m in BLOCK.finditer(text)]
    for m in BLOCK.finditer(text):
        if m.group("end") != m.group("name"):
            raise PageError(f"{page}: block {m.group('name')!r} ends as {m.group('end')!r}")
    if len(MARKER.findall(text)) != 2 * len(found):
        raise PageError(f"{page}: a BEGIN generated or END generated marker has no partner")
    for name, _ in found:
        if name not in BLOCKS:
            raise PageError(f"{page}: block {name!r} is not registered in "
                            "reserve_occupy_sim/studies/pages.py")
    return found


def rewrite(text: str, results_dir: Path = RESULTS, names=None, page: str = "<page>") -> str:
    """The page with every block (or those in ``names``) rendered from ``results_dir``."""
    blocks(text, page)

    def fill(m: re.Match) -> str:
        name = m.group("name")
        if names is not None and name not in names:
            return m.group(0)
        return (f"<!-- BEGIN generated:{name} -->\n{BLOCKS[name].text(results_dir)}"
                f"<!-- END generated:{name} -->")
    return BLOCK.sub(fill, text)


def pages(docs: Path = DOCS) -> list[Path]:
    """Every Markdown page under docs/ that has a generated block."""
    return [p for p in sorted(Path(docs).rglob("*.md"))
            if "<!-- BEGIN generated:" in p.read_text(encoding="utf-8")]


def update(names=None, results_dir: Path = RESULTS, docs: Path = DOCS) -> list[Path]:
    """Rewrite the blocks (all, or ``names``) in every page; returns the pages changed. A
    study writing anywhere but the repository's docs/results leaves the pages alone."""
    if Path(results_dir).resolve() != RESULTS.resolve() and Path(docs) == DOCS:
        return []
    changed = []
    for path in pages(docs):
        old = path.read_text(encoding="utf-8")
        new = rewrite(old, results_dir, names, str(path))
        if new != old:
            atomic_io.write_text(path, new)
            changed.append(path)
    return changed


def study_main(argv: list[str] | None, doc: str, results: str, compute: Callable[[], dict],
               render: Callable[[dict], str]) -> int:
    """A small study's command line: ``compute()`` its payload, write it to ``results`` under
    ``--results-dir`` (default docs/results), print ``render(payload)`` and rewrite the pages'
    blocks it feeds (the evidence studies beside the regime map share this)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--results-dir", default=str(RESULTS),
                        help=f"where {results} goes (default docs/results)")
    args = parser.parse_args(argv)
    payload = compute()
    path = Path(args.results_dir) / results
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_io.write_text(path, json.dumps(payload, indent=1) + "\n")
    print(render(payload))
    for page in update(fed_by(results), Path(args.results_dir)):
        print(f"rewrote {page}")
    return 0


def stale(results_dir: Path = RESULTS, docs: Path = DOCS) -> list[str]:
    """One line per block whose page text differs from its results."""
    out = []
    for path in pages(docs):
        for name, body in blocks(path.read_text(encoding="utf-8"), str(path)):
            if body != BLOCKS[name].text(results_dir):
                out.append(f"{path.relative_to(Path(docs).parent)}: block {name!r} differs "
                           f"from {BLOCKS[name].source}: run `{BLOCKS[name].target}`")
    return out


# ------------------------------------------------------------------ renderers -------------

def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


def workload_stats(payload: dict) -> str:
    """The shipped workload's realised statistics (``Workload.stats()``, in every results
    file of experiments 1-3)."""
    s = payload["workload_stats"]
    return markdown(
        ["groups", "prompt mean / max", "response mean", "median", "p90", "at the 38,912 cap",
         "mean of each group's longest", "ICC of log length"],
        [[f"{s['groups']:.0f} × {s['group_size']:.0f}",
          f"{s['prompt_mean']:.0f} / {s['prompt_max']:.0f}", f"{s['response_mean']:,.0f}",
          f"{s['response_median']:,.0f}", f"{s['response_p90']:,.0f}",
          f"{s['fraction_at_max']:.1%}", f"{s['group_max_mean']:,.0f}",
          f"{s['log_length_icc']:.2f}"]])


def calibration(payload: dict) -> str:
    """The cost preset the results were computed with, and the derivation of each value."""
    cost = payload["cost"]
    why = cost.get("derivation", {})
    rows = []
    for key, value in cost["rollout"].items():
        rows.append([f"`{key}`", value, why.get(key, "")])
    train = cost["train"]
    for key in ("per_token_s", "per_token_sq_s", "fixed_s"):
        rows.append([f"`train.{key}`", train[key], why.get(f"train.{key}", "")])
    rows.append(["`train.pipeline_stages`, `microbatch_size`",
                 f"{train['pipeline_stages']}, {train['microbatch_size']}",
                 why.get("train.pipeline", "")])
    rows.append(["`train.sync_s`", train["sync_s"], why.get("train.sync_s", "")])
    rows.append(["`instances`, `concurrency`", f"{cost['instances']}, {cost['concurrency']}",
                 why.get("hardware", "")])
    return markdown(["parameter", "value", "derivation"],
                    [[k, f"{v:g}" if isinstance(v, float) else v, w] for k, v, w in rows])


_SOURCE_ORDER = ("reserve_occupy", "nemo_in_order", "nemo_weight_fifo", "verl_drop", "trl",
                 "roll", "areal")


def exp2_beside_source(payload: dict) -> str:
    """Experiment 2 beside the source's numbers: our 10-batch run (seed 0), the spread over
    the workload seeds, and the 100-batch run; each policy's label carries the bound its
    trained data obeys when that differs from the row's eta (TRL)."""
    runs = {(r["policy"], r["grid_eta"]): r for r in payload["runs"]}
    long = {(r["policy"], r["grid_eta"]): r for r in payload["runs_100_batches"]}
    spread = payload["seed_spread"]
    src_thr, src_up = payload["source_throughput"], payload["source_speedup"]
    etas = sorted({e for _, e in runs})
    rows = []
    for name in _SOURCE_ORDER:
        for eta in etas:
            r, ro = runs[(name, eta)], runs[("reserve_occupy", eta)]
            label = r["label"] + (f" (η={r['eta']})" if r["eta"] != eta else "")
            up = src_up.get(name, "")
            up = up.get(str(eta), "") if isinstance(up, dict) else up
            if name == "reserve_occupy":
                t = spread["ro_throughput"][str(eta)]
                seeds = f"{_mean(t):.0f} [{min(t):.0f}, {max(t):.0f}] tok/s"
                hundred = f"{long[(name, eta)]['throughput']:.0f} tok/s"
                ours = ""
            else:
                v = spread["speedup"][f"{eta}:{name}"]
                seeds = f"{_mean(v):.2f} [{min(v):.2f}, {max(v):.2f}]"
                ratio = (long[("reserve_occupy", eta)]["throughput"]
                         / long[(name, eta)]["throughput"])
                hundred = f"{ratio:.2f}"
                ours = f"{ro['throughput'] / r['throughput']:.2f}"
            rows.append([eta, label, src_thr.get(name, {}).get(str(eta), ""),
                         round(r["throughput"]), up, ours, seeds, hundred])
    n = spread["seeds"]
    return markdown(["η", "policy", "source tok/s", "our tok/s", "source RO ÷ it",
                     "our RO ÷ it", f"over {n} seeds (mean [min, max])", "over 100 batches"],
                    rows)


_EXP4_COLUMNS = (("NeMo in_order", "÷ in_order"),
                 ("NeMo in_order, drop path (what-if)", "÷ in_order, drop path"),
                 ("NeMo weight_fifo", "÷ weight_fifo"),
                 ("NeMo weight_fifo, drop path (what-if)", "÷ weight_fifo, drop path"),
                 ("verl drop", "÷ verl drop"), ("TRL", "÷ TRL"), ("ROLL", "÷ ROLL"),
                 ("AReaL", "÷ AReaL"), ("unbounded (no bound)", "÷ unbounded"))


def exp4_summary(payload: dict) -> str:
    """Experiment 4 in one row per (rate, skew, eta): Reserve–Occupy's steady tok/s and the
    share of tokens it filtered, and RO ÷ each policy (mean over seeds; 'stalled k/n' where a
    policy wedged). Every column with min/max is in tables.md (exp4_filtering)."""
    cells: dict[tuple, dict] = {}
    for c in payload["cells"]:
        cells.setdefault((c["rate"], c["skew"], c["eta"]), {})[c["policy"]] = c
    rows = []
    for (rate, skew, eta), by in cells.items():
        ro = [r for r in by["Reserve–Occupy"]["runs"] if "steady" in r]
        row = [f"{rate:g}", {1.0: "+1", 0.0: "0", -1.0: "−1"}.get(skew, f"{skew:g}"), eta,
               round(_mean(r["steady"] for r in ro)), f"{_mean(r['filtered'] for r in ro):.0%}"]
        for label, _ in _EXP4_COLUMNS:
            c = by[label]
            row.append(f"{_mean(c['ratio']):.2f}" if not c["stalled"] else
                       f"stalled {c['stalled']}/{len(c['runs'])}")
        rows.append(row)
    return markdown(["no-grad rate", "skew", "η", "RO tok/s", "tokens filtered"]
                    + [h for _, h in _EXP4_COLUMNS], rows)


def regimes_workload_slice(payload: dict) -> str:
    """The workload slice of the regime map: per eta and share at the cap, for each no-gradient
    rate, the regime letter, RO ÷ in_order, [RO ÷ in_order through the drop path,] RO ÷ verl."""
    cells = [c for c in payload["cells"] if c["slice"] == "workload"]
    rates = sorted({c["filter_rate"] for c in cells})
    rows = []
    for eta in sorted({c["eta"] for c in cells}):
        for cap in sorted({c["truncated"] for c in cells}):
            row = [eta, f"{cap * 100:g} %"]
            for rate in rates:
                (c,) = [x for x in cells if (x["eta"], x["truncated"], x["filter_rate"])
                        == (eta, cap, rate)]
                r = c["ratios"]
                parts = [c["regime"][0].upper(), f"{r['nemo_in_order']['mean']:.2f}"]
                if "nemo_in_order/drop" in r:
                    parts.append(f"{r['nemo_in_order/drop']['mean']:.2f}")
                parts.append(f"{r['verl_drop']['mean']:.2f}")
                row.append(" ".join(parts))
            rows.append(row)
    return markdown(["η", "at the cap"] + [f"no-gradient {r:g}" for r in rates], rows)


def frontier_table(payload: dict) -> str:
    """The table ``frontier.run`` printed, with its footer of bounds."""
    return payload["table"]


# ------------------------------------------------------------------ the registry ----------

EXPERIMENTS = "make sim-experiments"
section("exp1", EXPERIMENTS)
section("exp2_throughput", EXPERIMENTS, "exp2")
from_json("exp2_beside_source", EXPERIMENTS, "exp2_throughput.json", exp2_beside_source)
section("exp2_wedge", EXPERIMENTS)
section("exp3", EXPERIMENTS)
from_json("workload_stats", EXPERIMENTS, "exp1_correctness.json", workload_stats)
from_json("calibration", EXPERIMENTS, "exp1_correctness.json", calibration)
from_json("exp4_filtering", EXPERIMENTS, "exp4_filtering.json", exp4_summary)
section("exp5_timeout", EXPERIMENTS)
section("exp6_regimes", EXPERIMENTS)
section("exp6_oversampling", EXPERIMENTS)
from_json("exp6_workload", EXPERIMENTS, "regimes.json", regimes_workload_slice)
from_json("exp6_targets", EXPERIMENTS, "regimes.json",
          "reserve_occupy_sim.studies.regimes_render:targets_count_table")
from_json("exp6_peers", EXPERIMENTS, "regimes.json",
          "reserve_occupy_sim.studies.regimes_render:peers_table")
from_json("exp6_same_prompts", "python -m reserve_occupy_sim.studies.regimes_stretch",
          "regimes_same_prompts.json", "reserve_occupy_sim.studies.regimes_stretch:table")
from_json("exp6_trainer_drift", "python -m reserve_occupy_sim.studies.regimes_drift",
          "regimes_trainer_drift.json", "reserve_occupy_sim.studies.regimes_drift:table")
from_json("frontier", "make sim-frontier", "frontier.json", frontier_table)
from_json("stuck_options", "python -m reserve_occupy_sim.studies.stuck_options",
          "stuck_options.json", "reserve_occupy_sim.studies.stuck_options:table")
section("bound", "make sim-bound")
for _name, _func in (("streaming-table", "table"), ("streaming-bound", "bound_table"),
                     ("streaming-sweep", "sweep_table"), ("streaming-targets", "targets_table"),
                     ("streaming-regimes", "regimes_block"),
                     ("streaming-regimes-peers", "regimes_peers_block"),
                     ("streaming-regimes-losses", "regimes_losses_block")):
    from_json(_name, "make sim-streaming", "streaming.json",
              f"reserve_occupy_sim.studies.streaming_render:{_func}")

from_json("streaming-window-edges", "python -m reserve_occupy_sim.studies.streaming_window",
          "streaming.json", "reserve_occupy_sim.studies.streaming_window:table")

from_json("staleflow", "python -m reserve_occupy_sim.studies.staleflow", "staleflow.json",
          "reserve_occupy_sim.studies.staleflow:table")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m reserve_occupy_sim.studies.pages",
        description="Rewrite the generated tables in docs/ from docs/results/ (no simulation).")
    parser.add_argument("--check", action="store_true",
                        help="only list the blocks that differ from their results (exit 1)")
    args = parser.parse_args(argv)
    try:
        if args.check:
            out = stale()
            print("\n".join(out) or "every generated block agrees with docs/results/")
            return 1 if out else 0
        for path in update():
            print(f"rewrote {path.relative_to(ROOT)}")
    except PageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from runtime.cli import script

    script(main, "python -m reserve_occupy_sim.studies.pages")
