"""Docs agree with each other (issue 35, item 6): a figure stated on more than one page is stated
as its primary page (or the results it is computed from) has it, or the other pages link to the
primary instead of restating it. ``tests/test_readme_claims.py`` checks that a README number
appears somewhere on a linked page; this checks that two pages do not say different things.

Each check reads the pages by stable phrases, not by line numbers, and each is shown to catch
the disagreement it is about on an edited copy of the text (the ``*_is_caught`` tests). On the
text before this test (main 6e4f80c) it failed on every disagreement issue 35 names that was
still there: docs/sim/regimes.md and docs/simulator.md "2–3 %" for how far verl drop is ahead
(the map: up to 5 %), docs/simulator.md and docs/sim/timeout.md advising on the STUCK timeout
without the runtime's default (60 s), docs/runtime.md's tiny-model build time (20 s and 14 s);
docs/calibration.md quoted the two grids' reference rates as "about 2,300 against about 3,500"
where the results files give medians of 2,588 and 3,369.

The primary pages:
- how far verl drop is ahead of Reserve–Occupy over the regime map: docs/sim/diagnose.md, "The
  cells below 1", computed from docs/results/regimes.json (README's claim row restates it);
- the runtime's STUCK timeout, its default and when to turn it off: docs/runtime.md, "The STUCK
  timeout cannot livelock", whose default is the config's;
- the real engine's measurements: docs/peers.md's generated block (the headline grid) and
  docs/calibration.md's (the calibration grid); a ratio with its interval stated elsewhere is
  one of theirs, and the reference's rate in each grid is its results file's median;
- the tiny model's build time: docs/runtime.md's measured run of ``make demo``.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _read(rel: str) -> str:
    return (ROOT / rel).read_text(encoding="utf-8")


def _pages() -> dict[str, str]:
    """README and every page under docs/, by repository-relative path."""
    out = {"README.md": _read("README.md")}
    for p in sorted(DOCS.rglob("*.md")):
        out[p.relative_to(ROOT).as_posix()] = p.read_text(encoding="utf-8")
    return out


def _paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


def _sentences(paragraph: str) -> list[str]:
    return re.split(r"(?<=[.!?])\s+(?=[A-Z*(\[`])|\n(?=\s*(?:[-*] |\d+\. |\|))", paragraph)


PERCENT = re.compile(r"\d+(?:\.\d+)?(?:\s*[–-]\s*\d+(?:\.\d+)?)?\s?%")


# -- how far verl drop is ahead over the regime map ---------------------------------------------

def _map_figures() -> dict[str, int]:
    """From docs/results/regimes.json: the distinct cells, how many have Reserve–Occupy's cell
    mean below verl drop's, how many below 0.985, and the largest gap in whole percent."""
    cells = json.loads(_read("docs/results/regimes.json"))["cells"]
    distinct = {}
    for c in cells:
        key = (c["eta"], c["train_mult"], c["concurrency"], c["truncated"], c["filter_rate"])
        distinct.setdefault(key, c["ratios"]["verl_drop"]["mean"])
    ratios = list(distinct.values())
    return {"cells": len(ratios), "below": sum(r < 1 for r in ratios),
            "below_0985": sum(r < 0.985 for r in ratios),
            "up_to": round(100 * (1 - min(ratios)))}


def _diagnose_figures(text: str) -> dict[str, int]:
    cells = re.search(r"Over the (\d+) distinct cells of the map", text)
    verl = re.search(r"\*\*verl drop, by up to (\d+) %\*\*: below 1 in (\d+) cells, below 0\.985 "
                     r"in (\d+)", text)
    assert cells and verl, "docs/sim/diagnose.md no longer states verl drop's cells below 1"
    return {"cells": int(cells[1]), "up_to": int(verl[1]), "below": int(verl[2]),
            "below_0985": int(verl[3])}


def _readme_figures(text: str) -> dict[str, int]:
    m = re.search(r"verl ahead in (\d+) of (\d+) cells, by up to (\d+) %", text)
    assert m, "README's claim row against verl drop no longer states where verl is ahead"
    return {"below": int(m[1]), "cells": int(m[2]), "up_to": int(m[3])}


def _verl_ahead_restated(pages: dict[str, str], up_to: int) -> list[str]:
    """Sentences, outside the primary page, about verl drop being ahead of (or Reserve–Occupy
    behind) in cells of the map that state a percentage other than the primary's, or whose
    paragraph does not link the primary."""
    found = []
    for name, text in pages.items():
        if name == "docs/sim/diagnose.md":
            continue
        for para in _paragraphs(text):
            for s in _sentences(para):
                if not (re.search(r"\bverl\b", s, re.I) and re.search(r"\b(ahead|behind)\b", s)
                        and re.search(r"\bcells?\b", s)):
                    continue
                wrong = [p for p in PERCENT.findall(s)
                         if re.sub(r"\s", "", p) != f"{up_to}%"]
                if wrong or "diagnose.md" not in para:
                    found.append(f"{name}: {s.strip()[:120]!r} "
                                 f"({'states ' + ', '.join(wrong) if wrong else 'no link'})")
    return found


def test_verl_ahead_is_stated_as_the_map_has_it():
    truth = _map_figures()
    assert _diagnose_figures(_read("docs/sim/diagnose.md")) == truth
    readme = _readme_figures(_read("README.md"))
    assert readme == {k: truth[k] for k in readme}


def test_other_pages_link_to_where_verl_ahead_is_stated():
    assert _verl_ahead_restated(_pages(), _map_figures()["up_to"]) == []


def test_a_restated_verl_figure_is_caught():
    pages = {"docs/sim/regimes.md": _read("docs/sim/regimes.md")}
    assert _verl_ahead_restated(pages, _map_figures()["up_to"]) == []
    old = ("verl is 2–3 % ahead in a few cells: at η ≥ 3 with a fast trainer, and at η = 1 with "
           "2× training\ncost. With 4× training cost the two tie.")
    (problem,) = _verl_ahead_restated({"docs/sim/regimes.md": old}, 5)
    assert "2–3 %" in problem
    (problem,) = _verl_ahead_restated(
        {"docs/simulator.md": "It can be 5 % behind verl in a few cells."}, 5)
    assert "no link" in problem


# -- the runtime's STUCK timeout ----------------------------------------------------------------

STUCK_ANCHOR = "runtime.md#the-stuck-timeout-cannot-livelock"


def _config_stuck_default() -> float:
    from runtime.config import TrainConfig

    return TrainConfig().timeouts.stuck_s


def _runtime_stuck_defaults(text: str) -> list[str]:
    """Every place docs/runtime.md states the default of ``timeouts.stuck_s``."""
    row = re.findall(r"^\| `timeouts\.stuck_s` \| ([^|]+?) \|", text, re.M)
    prose = re.findall(r"`timeouts\.stuck_s` defaults to (\S+) s\b", text)
    return row + prose


def _stuck_advice_without_link(pages: dict[str, str]) -> list[str]:
    """Paragraphs, outside docs/runtime.md, that advise how to set the STUCK timeout without
    linking the runtime's statement of its default."""
    found = []
    for name, text in pages.items():
        if name == "docs/runtime.md":
            continue
        for para in _paragraphs(text):
            advice = re.search(r"longest\s+legitimate\s+generation|stuck_timeout_s`?\s+off", para)
            if advice and STUCK_ANCHOR not in para:
                found.append(f"{name}: {para.strip()[:100]!r}")
    return found


def test_the_runtime_page_states_the_configs_stuck_default():
    text = _read("docs/runtime.md")
    stated = _runtime_stuck_defaults(text)
    assert len(stated) >= 2, stated  # the settings table and the section the other pages link
    assert {float(s) for s in stated} == {_config_stuck_default()}
    heading = "### The STUCK timeout cannot livelock"
    assert heading in text
    section = text.split(heading, 1)[1].split("\n### ", 1)[0]
    assert re.search(r"`timeouts\.stuck_s` defaults to", section)
    assert "Turn it off" in section  # when to turn it off, stated with the default


def test_stuck_timeout_advice_links_to_the_runtime():
    assert _stuck_advice_without_link(_pages()) == []


def test_stuck_advice_without_the_runtimes_default_is_caught():
    old = ("5. **Leave `stuck_timeout_s` off for throughput.** If you set it, set it above your "
           "longest\n   legitimate generation, as a guard against hung units "
           "([timeout](sim/timeout.md)).")
    (problem,) = _stuck_advice_without_link({"docs/simulator.md": old})
    assert "Leave" in problem
    assert _runtime_stuck_defaults("| `timeouts.stuck_s` | 30 | release_stuck ... |") == ["30"]


# -- the tiny model's build time ----------------------------------------------------------------

def _build_times(runtime_md: str) -> set[str]:
    """The tiny model's build time, every time "What `make demo` does" states it in seconds."""
    section = runtime_md.split("## What `make demo` does", 1)[1].split("\n## ", 1)[0]
    after = re.findall(r"\bbuild(?:ing|s)?\b[^.;()]{0,30}?\b(\d+(?:\.\d+)?) s\b", section)
    before = re.findall(r"\b(\d+(?:\.\d+)?) s (?:building|to build)\b", section)
    return set(after + before)


def test_the_tiny_model_build_time_is_one_figure():
    times = _build_times(_read("docs/runtime.md"))
    assert len(times) == 1, times


def test_two_build_times_are_caught():
    text = ("## What `make demo` does\n\n1. cached; building takes about 20 s here, once per "
            "machine.\n\nMeasured: 52 s wall for the whole command — 14 s building the tiny "
            "model (once per machine).\n\n## Next\n")
    assert _build_times(text) == {"20", "14"}


# -- the real engine's ratios: stated as the generated blocks have them --------------------------

INTERVAL = re.compile(r"(?:(\d\.\d{3})\s+)?\[(\d\.\d{3}), (\d\.\d{3})\]")
GENERATED = re.compile(r"<!-- begin: ([\w-]+) \(generated\) -->.*?<!-- end: \1 -->", re.S)


def _generated(text: str) -> str:
    return "\n".join(m[0] for m in GENERATED.finditer(text))


def _measured() -> tuple[set[tuple[str, str]], set[tuple[str, str, str]]]:
    """Every interval, and every (median, interval), in the generated blocks of docs/peers.md,
    docs/calibration.md and docs/learning.md."""
    blocks = (_generated(_read("docs/peers.md")) + _generated(_read("docs/calibration.md"))
              + _generated(_read("docs/learning.md")))
    found = INTERVAL.findall(blocks)
    assert len(found) >= 20, "the measurement blocks of peers.md / calibration.md moved"
    return {(lo, hi) for _, lo, hi in found}, {t for t in found if t[0]}


def _unmeasured(pages: dict[str, str]) -> list[str]:
    """Ratios with intervals stated in prose that no generated block holds."""
    intervals, triples = _measured()
    found = []
    for name, text in pages.items():
        prose = GENERATED.sub("", text)
        for median, lo, hi in INTERVAL.findall(prose):
            ok = (median, lo, hi) in triples if median else (lo, hi) in intervals
            if not ok:
                found.append(f"{name}: {median} [{lo}, {hi}]".replace(": [", ": ["))
    return found


def _calibrate_ratios_in_peers(peers_md: str, calibration_md: str) -> list[str]:
    """The ratios docs/peers.md quotes from ``make calibrate`` (``N.NNNx`` in a sentence naming
    it) that are not a measured median of docs/calibration.md's block."""
    medians = {m for m, _, _ in INTERVAL.findall(_generated(calibration_md)) if m}
    found = []
    for para in _paragraphs(GENERATED.sub("", peers_md)):
        for s in _sentences(para):
            if "make calibrate" in s or "calibration.md" in s:
                found += [r for r in re.findall(r"\b(\d\.\d{3})x\b", s) if r not in medians]
    return found


def test_measured_ratios_are_the_generated_blocks():
    pages = {name: _read(name) for name in ("README.md", "docs/peers.md", "docs/calibration.md")}
    assert _unmeasured(pages) == []
    assert _calibrate_ratios_in_peers(pages["docs/peers.md"], pages["docs/calibration.md"]) == []


def test_a_stale_measured_ratio_is_caught():
    peers, calibration = _read("docs/peers.md"), _read("docs/calibration.md")
    assert "`verl_drop` 1.117x" in peers
    edited = peers.replace("`verl_drop` 1.117x", "`verl_drop` 1.208x")
    assert _calibrate_ratios_in_peers(edited, calibration) == ["1.208"]
    readme = _read("README.md").replace("1.317 [1.275, 1.387]", "1.317 [1.275, 1.388]")
    assert _unmeasured({"README.md": readme}) == ["README.md: 1.317 [1.275, 1.388]"]


def _reference_medians() -> tuple[int, int]:
    """The median steady-state trained tok/s of the reference's runs (``nemo_in_order`` whole
    batch, ``refit: keep``, eta 1) in the calibration grid and in the headline grid."""
    out = []
    for name in ("calibration", "peers_compare"):
        runs = json.loads(_read(f"docs/results/{name}.json"))["runs"]
        rates = sorted(r["steady_trained_tok_s"] for r in runs
                       if (r["policy"], r["streaming"], r["refit"], r["eta"])
                       == ("nemo_in_order", False, "keep", 1))
        n = len(rates)
        out.append(round((rates[(n - 1) // 2] + rates[n // 2]) / 2))
    return out[0], out[1]


def _stated_reference_rates(calibration_md: str) -> tuple[int, int]:
    m = re.search(r"trained\s+tokens/s of the reference.*?was a median of ([\d,]+) over its\s+\d+ "
                  r"runs here against ([\d,]+)", calibration_md, re.S)
    assert m, "docs/calibration.md no longer compares the reference's rate with the headline grid's"
    return int(m[1].replace(",", "")), int(m[2].replace(",", ""))


def test_calibration_quotes_both_grids_reference_rates_as_measured():
    assert _stated_reference_rates(_read("docs/calibration.md")) == _reference_medians()


def test_a_stale_reference_rate_is_caught():
    old = ("the steady-state trained\ntokens/s of the reference, `nemo_in_order` whole batch at "
           "eta 1, was a median of 2,300 over its\n64 runs here against 3,500 over its 32")
    assert _stated_reference_rates(old) == (2300, 3500) != _reference_medians()


# -- README "Where things are": the pointers issue 35 asked for resolve -------------------------

def _defined(path: Path) -> set[str]:
    """``Class.method`` for every method of every class in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {f"{c.name}.{f.name}" for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
            for f in c.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _pointer_problems(readme: str) -> list[str]:
    section = readme.split("## Where things are", 1)[1].split("\n## ", 1)[0]
    bullets = {b.split("**")[1]: b for b in re.split(r"\n(?=- \*\*)", section) if "**" in b}
    wanted = {"In-flight refit": ("Driver._sync_weights", "VLLMRollout.pause"),
              "The sharded trainer": ("RankTrainer._divisor", "RankTrainer._wrap_model")}
    problems = []
    for title, symbols in wanted.items():
        bullet = bullets.get(title)
        if bullet is None:
            problems.append(f"no bullet {title!r}")
            continue
        files = [ROOT / p for p in re.findall(r"\]\(([^)#]+\.py)\)", bullet)]
        defined = set().union(*(_defined(f) for f in files if f.is_file()))
        for sym in symbols:
            if f"`{sym}`" not in bullet:
                problems.append(f"{title!r} does not name {sym}")
        for sym in re.findall(r"`([A-Z]\w*\.\w+)`", bullet):
            if sym not in defined:
                problems.append(f"{title!r}: {sym} is in none of {[f.name for f in files]}")
    if not re.search(r"normalises\s+the\s+loss", bullets.get("The sharded trainer", "")):
        problems.append("'The sharded trainer' does not say how it normalises the loss")
    return problems


def test_readme_points_to_in_flight_refit_and_the_loss_normalisation():
    assert _pointer_problems(_read("README.md")) == []


def test_a_stale_pointer_is_caught():
    readme = _read("README.md").replace("`Driver._sync_weights`", "`Driver._sync_weight`")
    assert _pointer_problems(readme) == ["'In-flight refit' does not name Driver._sync_weights",
                                         "'In-flight refit': Driver._sync_weight is in none of "
                                         "['driver.py', 'vllm_engine.py']"]
