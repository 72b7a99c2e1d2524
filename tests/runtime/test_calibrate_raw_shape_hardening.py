"""``calibrate.py --from-raw RAW``: a raw file whose comparisons lack a field the page reads is
refused up front, one line naming the comparison and the field, exit 2, nothing written.

Before: ``read_raw`` checked the top-level fields and that ``compared`` held lists of runs,
pairs and comparisons, not what each comparison holds. A comparison without ``seeds`` passed,
the grid was fitted and every run simulated (40 s on a committed raw file), then ``render``
died in peers_compare's table (``len(c['seeds'])``): a ``KeyError`` traceback, exit 1.
``seeds`` is not optional in any raw file: a comparison has had it since comparisons exist
(peers_compare.summarize_pairs, the instrument's first grid).

The grid here is test_calibrate_prior_fit's hand-made one, its comparison completed with what
``summarize_pairs`` writes: complete, it renders; without any field ``COMPARISON_KEYS`` or
``SUMMARY_KEYS`` names, it is refused; without any other field (written by later versions,
read with ``.get``), it still renders."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import load_bench
from .test_calibrate_prior_fit import _grid

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "calibrate.py"


def _summary(median: float) -> dict:
    return {"pairs": 2, "ratios": [median, median], "median": median, "lo": median,
            "hi": median, "resolved": False, "method": "sign", "level": 0.9}


def _raw(bench) -> dict:
    """A --raw file's content: the grid, its comparison as summarize_pairs writes it."""
    compared, measured = _grid()
    compared["instrument"] = {"interval": "sign", "level": bench.peers.instrument.LEVEL,
                              "order_seed": 0, "order": "alternate", "warmup_steps": 1}
    (c,) = compared["comparisons"]
    c.update({"against_config": ["nemo_in_order", False, "keep", 1], "seeds": [0, 1],
              "first": ["a", "b"], "diff": [0, 1], "same_decisions": False, "lever": False,
              "gen": _summary(1.0), "trained_tok_s": [100.0, 110.0], "staleness_max": 1,
              "staleness_mean": 0.5, "units_dropped": 0.0, "wait_s": [[1.0, 1.1], [1.0, 1.2]],
              "straggler_s": [[0.1, 0.2], [0.1, 0.1]]})
    for p, ratio in zip(compared["pairs"], (1.0, 1.0)):
        p["ratio"] = ratio
    return {"steps": 4, "seeds": [0, 1], "median": 8.0, "sigma": 1.5, "compared": compared,
            "measured": measured, "shape": [2, 4]}


def _page(bench, dump: dict) -> str:
    """What ``--from-raw`` prints for ``dump`` (its ``__main__``, in this process)."""
    compared = bench.peers.resummarize(dump["compared"], "sign", bench.peers.instrument.LEVEL)
    results = bench.finish(compared, dump["measured"], dump["steps"], dump["seeds"],
                           dump["median"], dump["sigma"], 0.0, tuple(dump["shape"]))
    return bench.render(results)


class _Bad(Exception):
    pass


def _refusal(bench, tmp_path: Path, dump: dict) -> str | None:
    """``read_raw``'s one line for ``dump``, or None when it accepts the file."""
    path = tmp_path / "raw.json"
    path.write_text(json.dumps(dump))

    def bad(msg: str):
        raise _Bad(msg)

    try:
        bench.read_raw(path, bad)
    except _Bad as e:
        return str(e)
    return None


def test_a_complete_comparison_is_accepted_and_renders(tmp_path):
    bench = load_bench("calibrate")
    dump = _raw(bench)
    assert _refusal(bench, tmp_path, dump) is None
    assert "| 1 | reserve_occupy | off | keep |" in _page(bench, dump)


# Every field of a comparison the page reads unguarded (render_compared, compared_rows,
# peers_compare.render_compared): (summary, field), "" for the comparison itself.
REQUIRED = ([("", k) for k in ("aa", "against", "diff", "eta", "gen", "policy", "refit",
                               "same_decisions", "seeds", "staleness_max", "staleness_mean",
                               "streaming", "trained", "trained_tok_s", "units_dropped")]
            + [("trained", k) for k in ("hi", "lo", "median", "pairs", "resolved")]
            + [("gen", k) for k in ("hi", "lo", "median")])


@pytest.mark.parametrize("part, key", REQUIRED, ids=[f"{p}.{k}".lstrip(".")
                                                     for p, k in REQUIRED])
def test_a_comparison_without_a_field_the_page_reads_is_refused_naming_it(tmp_path, part, key):
    bench = load_bench("calibrate")
    dump = _raw(bench)
    c = dump["compared"]["comparisons"][0]
    del (c[part] if part else c)[key]
    line = _refusal(bench, tmp_path, dump)
    assert line is not None, f"accepted without {part}.{key}"
    where = f"{part!r}: {key!r}" if part else f"{key!r}"
    assert f"comparison 0: {where} missing or not a " in line and "\n" not in line, line
    # ... and the page indeed reads it: without the check, render (or the fit before it) fails
    with pytest.raises((KeyError, TypeError)):
        _page(bench, dump)


@pytest.mark.parametrize("key", ["against_config", "first", "lever", "wait_s", "straggler_s"])
def test_a_comparison_without_an_optional_field_still_renders(tmp_path, key):
    """Fields of later versions of peers_compare, read with ``.get`` (or not at all): a raw
    file without them is not refused, and its page renders."""
    bench = load_bench("calibrate")
    dump = _raw(bench)
    del dump["compared"]["comparisons"][0][key]
    assert _refusal(bench, tmp_path, dump) is None
    assert "| 1 | reserve_occupy | off | keep |" in _page(bench, dump)


@pytest.mark.parametrize("value", [None, "0,1", 3])
def test_a_comparison_whose_seeds_are_not_a_list_is_refused(tmp_path, value):
    bench = load_bench("calibrate")
    dump = _raw(bench)
    dump["compared"]["comparisons"][0]["seeds"] = value
    assert "comparison 0: 'seeds' missing or not a list" in _refusal(bench, tmp_path, dump)


def test_the_command_refuses_comparisons_without_seeds_and_writes_nothing(tmp_path):
    """End to end: one line on stderr, exit 2, before the fit; --write's results file and page
    untouched. On the old code: exit 1 after the fit, a KeyError: 'seeds' traceback."""
    bench = load_bench("calibrate")
    dump = _raw(bench)
    for c in dump["compared"]["comparisons"]:
        del c["seeds"]
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps(dump))
    doc = tmp_path / "doc.md"
    doc.write_text(f"page\n{bench.BEGIN}\nold\n{bench.END}\n")
    results = tmp_path / "results.json"
    results.write_text("{}")
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir()}
    p = subprocess.run([sys.executable, str(SCRIPT), "--from-raw", str(raw), "--write",
                        "--results", str(results), "--doc", str(doc)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    (line,) = p.stderr.strip().splitlines()
    assert line == (f"calibrate: --from-raw {raw}: comparison 0: 'seeds' missing or not a "
                    f"list of whole numbers (a file of --raw from this version of "
                    f"calibrate.py)"), line
    assert p.stdout == ""
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir()} == before
    # the same file with its seeds: the command prints the page and exits 0
    raw.write_text(json.dumps(_raw(bench)))
    p = subprocess.run([sys.executable, str(SCRIPT), "--from-raw", str(raw)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "| 1 | reserve_occupy | off | keep |" in p.stdout


def test_the_committed_raw_shape_is_what_summarize_pairs_writes():
    """The checked fields are those peers_compare.summarize_pairs writes (a field renamed
    there without the check following fails here, not on a user's file)."""
    bench = load_bench("calibrate")
    run = {"steady_trained_tok_s": 100.0, "steady_gen_tok_s": 200.0, "staleness_max": 1,
           "staleness_mean": 0.5, "units_dropped": 0, "wait_s": 1.0, "straggler_s": 0.1}
    pairs = [{"comparison": 0, "seed": s, "first": "a", "diff": 0, "ratio": 1.0, "a": run,
              "b": run} for s in (0, 1)]
    comps = [{"a": ("reserve_occupy", False, "keep", 1), "b": ("nemo_in_order", False, "keep", 1),
              "against": "ref", "aa": False}]
    out = bench.peers.summarize_pairs(comps, pairs, "sign", bench.peers.instrument.LEVEL)
    (c,) = out["rows"]
    assert bench._comparison_error(0, c) is None, bench._comparison_error(0, c)
    assert set(bench.COMPARISON_KEYS) <= set(c)
    # the check covers REQUIRED, no more (a field it named beyond would refuse good files)
    assert {("", k) for k in bench.COMPARISON_KEYS} | {
        (part, k) for part, keys in bench.SUMMARY_KEYS.items() for k in keys} == set(REQUIRED)
