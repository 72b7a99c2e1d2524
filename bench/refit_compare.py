"""``rollout.refit: abort`` against ``keep`` (in-flight refit), side by side in one process on one
vLLM engine (CPU build, the tiny model), same seed and config otherwise.

Each mode trains ``--steps`` steps of the embedded task with long answers (no end token) so that
weight syncs land while requests decode; the reward counts the digit 1 (it varies inside every
group, so every step moves the weights). The runs alternate (abort, keep, abort, keep, ...) so
that the host's changing load hits both alike. Printed per mode: the trainer's
``onpolicy_logprob_err`` (mean |log pi_theta - log mu| over fresh tokens, per step: mean and max
over the steps), generated tokens/s, the weight-sync pause (``sync_s``: pause -> load -> publish
-> resume), requests resumed after an abort, and, for ``keep``, the tokens made after an
in-flight refit and how far their engine log-probabilities are from a full recompute by the
weights the token is attributed to (the stale-KV approximation, measured token by token), with
the tokens before the refit as the noise floor and the same tokens against the weights before
the refit as the scale (what the difference between consecutive versions is), and the largest
error of one-version segments (no refit inside; shows that no request reused prefix KV of older
weights). ``--write`` stores the numbers in docs/results/refit_compare.json and the table in
docs/runtime.md ("In-flight refit").

    python bench/refit_compare.py --steps 12 --rounds 2 --write
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from statistics import fmean
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docblock import between, splice  # noqa: E402
from bench.cli import Parser, float_in, in_path, int_in, int_list, out_path  # noqa: E402,F401

from runtime.rollout.env import configure  # noqa: E402

configure()

SETTINGS = {"run.progress": False, "run.plot": False, "run.eval_prompts": 0,
            "staleness.max_staleness": 1, "staleness.batch_size": 4,
            "staleness.group_size": 4, "staleness.filter_zero_variance": False,
            "rollout.ignore_eos": True, "rollout.max_tokens": 64, "rollout.temperature": 1.0,
            "trainer.lr": 1e-3, "run.keep_weights": 1000, "recovery.enabled": False,
            "run.seed": 3}


def ones(prompt: Any, completion: str) -> float:
    return float(completion.count("1"))


def _stale_kv_error(batches: list[Any], model: Path, weights: Path) -> dict[str, Any]:
    """|engine logprob - full recompute| for tokens after an in-flight refit and before it."""
    from tests.runtime.helpers import version_scorer  # as bench/verl_compare.py imports tests

    scorer = version_scorer(model, weights, Path(tempfile.mkdtemp()), temperature=1.0)

    after: list[float] = []
    before: list[float] = []
    vs_old: list[float] = []  # the same tokens against the weights before the refit
    single: list[float] = []  # segments made by one version (no refit inside)
    for b in batches:
        for g in b.groups:
            for s in g.samples:
                if s.segments != 1 or len(set(s.versions)) == 1:
                    if s.segments == 1:
                        scored1 = scorer(s.versions[0]).score([list(g.prompt_ids)],
                                                              [list(s.token_ids)])[0]
                        single += [abs(a - b) for a, b in zip(scored1, s.logprobs)]
                    continue
                vs = sorted(set(s.versions))
                scored = {v: scorer(v).score([list(g.prompt_ids)], [list(s.token_ids)])[0]
                          for v in vs}
                for i, x in enumerate(s.versions):
                    if x == vs[0]:
                        before.append(abs(scored[x][i] - s.logprobs[i]))
                    else:
                        after.append(abs(scored[x][i] - s.logprobs[i]))
                        prev = vs[vs.index(x) - 1]
                        vs_old.append(abs(scored[prev][i] - s.logprobs[i]))

    def stats(xs: list[float]) -> dict[str, Any]:
        return {"n": len(xs), "mean": fmean(xs) if xs else None, "max": max(xs, default=None)}

    return {"err_after_refit": stats(after), "err_before_refit": stats(before),
            "err_after_refit_vs_previous_version": stats(vs_old),
            "err_one_version": stats(single)}


DOC = ROOT / "docs" / "runtime.md"
RESULTS = ROOT / "docs" / "results" / "refit_compare.json"
BEGIN, END = "<!-- begin: refit-compare (generated) -->", "<!-- end: refit-compare -->"


def _g(x: float | None, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def render(results: dict[str, Any]) -> str:
    """The table docs/runtime.md shows, from the results file."""
    lines = ["| run | `onpolicy_logprob_err` mean / max | tokens/s | `sync_s` mean / max "
             "| requests resumed | tokens after a refit | their error mean / max "
             "| vs. the previous version | one-version tokens, max error |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results["runs"]:
        a, v, o = (r["err_after_refit"], r["err_after_refit_vs_previous_version"],
                   r["err_one_version"])
        lines.append(
            f"| {r['mode']} #{r['round'] + 1} | {r['onpolicy_logprob_err_mean']:.2g} / "
            f"{r['onpolicy_logprob_err_max']:.2g} | {r['tokens_per_s']:.0f} | "
            f"{r['sync_s_mean']:.3f} / {r['sync_s_max']:.3f} s | {r['resumed']} | {a['n']} | "
            f"{_g(a['mean'], '.3f')} / {_g(a['max'], '.2f')} | {_g(v['mean'], '.3f')} | "
            f"{_g(o['max'], '.1e')} |")
    return "\n".join(lines)


def doc_block(text: str) -> str:
    """What stands between the markers of docs/runtime.md."""
    return between(text, BEGIN, END)


def write(results: dict[str, Any]) -> None:
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    splice(DOC, BEGIN, END, render(results))


async def _one(engine: Any, model: Path, mode: str, steps: int, out: Path) -> dict[str, Any]:
    from runtime.config import load_config
    from runtime.data import load_prompts
    from runtime.session import run_training

    cfg = load_config(None, {**SETTINGS, "run.steps": steps, "rollout.refit": mode,
                             "run.output_dir": str(out)})
    seen: list[Any] = []

    def hook(driver: Any) -> None:
        train_step = driver.trainer.train_step

        async def spy(batch: Any) -> Any:
            seen.append(batch)
            return await train_step(batch)

        driver.trainer.train_step = spy

    result = await run_training(cfg, model, load_prompts(), ones, out, rollout=engine,
                                log=lambda _: None, driver_hook=hook)
    rows = result.rows
    err = [r["train/onpolicy_logprob_err"] for r in rows]
    row = {"mode": mode, "steps": len(rows),
           "onpolicy_logprob_err_mean": fmean(err), "onpolicy_logprob_err_max": max(err),
           "tokens_per_s": rows[-1]["tokens_per_s_total"],
           "sync_s_mean": fmean(r["sync_s"] for r in rows),
           "sync_s_max": max(r["sync_s"] for r in rows),
           "resumed": result.driver.counts["resumed"],  # type: ignore[union-attr]
           "time_s": rows[-1]["time_s"]}
    row.update(_stale_kv_error(seen, model, out / "weights"))
    return row


async def main(steps: int, rounds: int) -> list[dict[str, Any]]:
    from runtime.models.tiny import ensure_tiny_model
    from runtime.rollout.vllm_engine import VLLMRollout

    model = ensure_tiny_model(log=None)
    engine = VLLMRollout(model, max_model_len=128, max_num_seqs=64, seed=0)
    runs = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for k in range(rounds):
                for mode in ("abort", "keep"):
                    row = await _one(engine, model, mode, steps, Path(tmp) / f"{mode}{k}")
                    row["round"] = k
                    print(json.dumps(row), flush=True)
                    runs.append(row)
    finally:
        await engine.close()
    return runs


if __name__ == "__main__":
    parser = Parser(prog="refit_compare.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int_in(1, 10**6), default=12)
    parser.add_argument("--rounds", type=int_in(1, 10**4), default=2)
    parser.add_argument("--write", action="store_true",
                        help=f"write {RESULTS.relative_to(ROOT)} and the table of "
                             f"{DOC.relative_to(ROOT)}")
    args = parser.parse_args()
    runs = asyncio.run(main(args.steps, args.rounds))
    results = {"settings": SETTINGS, "steps": args.steps, "runs": runs}
    print(render(results))
    if args.write:
        write(results)
