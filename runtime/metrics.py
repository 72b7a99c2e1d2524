"""What a training run reports: one JSONL row per step (optionally TensorBoard scalars), a
progress bar, the final summary table and a PNG of reward and staleness over steps.

Per-step fields (``metrics.jsonl``):

* ``reward`` -- mean reward of every sample of every group completed since the previous step,
  filtered groups included (``samples_completed`` of them): the policy's actual success rate,
  the curve to watch. ``reward_trained`` is the mean
  over the samples the step trained on (after occupied filtering, so biased towards groups with
  mixed outcomes).
* ``staleness`` -- histogram {staleness: groups} of the consumed batch as the controller placed it;
  ``token_lag_max`` -- the largest ``version - oldest token version`` actually used in the batch
  (must be <= eta; measured from the per-token versions, not taken from the controller).
* ``tokens_per_s`` -- tokens the engine generated during this step's interval / its duration;
  ``tokens_per_s_total`` -- since the start. Aborted and surplus tokens count: they were computed.
  ``time_s``, ``tokens_generated``, ``tokens_trained``, ``tokens_per_s_total`` and the idle
  fractions are cumulative over the whole run, across ``--resume`` (``Carried``): a resumed
  run goes on from the last row its earlier incarnations wrote (the time between a crash and
  the resume, and the tokens generated after that row, are not counted). A step the crash
  cut short before its row gets a ``recovered`` row with recovery's retraining figures; when
  its checkpoint was committed before the crash, recovery retrains nothing and the row takes
  the figures that checkpoint's ``COMMIT.json`` recorded (a checkpoint without them, from an
  earlier version: ``tokens_unknown``: true on its row, and ``tokens_trained`` from that row
  on leaves them out).
* ``trainer_idle`` / ``rollout_idle`` -- fractions of wall time so far in which the trainer waited
  for a batch / no request was running in the engine (weight syncs count as rollout idle).
* ``tail_s`` -- seconds from the batch's last unit becoming final (the head buffer turned
  READY) to the optimiser step finishing: what the trainer still had to do once its batch was
  whole (the previous step's sync included, if that was still running). With
  ``trainer.streaming`` the units that finished earlier were trained in chunks during the wait
  (``stream_s`` seconds of it, ``streamed_units`` units), so only the rest and the step remain.
  ``wait_s`` is the idle part of the wait (chunk training excluded).
* ``length_ratio`` / ``length_ks`` -- the length bias so far (cumulative, ``accounting.LengthLog``):
  mean trained / mean admitted response length of the samples of every unit whose fate is
  settled, and the KS distance of the two length distributions (< 1: training saw shorter
  answers than the policy produced); ``length_trained_mean`` / ``length_admitted_mean`` (tokens)
  and ``samples_trained`` / ``samples_admitted`` behind them. None until a sample trained.
* ``train/*`` -- the trainer's metrics (loss, clip_frac, ratio_mean, ratio_max, kl_behaviour,
  grad_norm, stale_token_frac, onpolicy_logprob_err, lr, version_gap_mean, version_gap_max;
  with ``trainer.correction`` the corr_* metrics of runtime.trainer.corrections).
* ``reward/*`` -- with a reward that counts (the math reward's reasons: correct, wrong,
  no_boxed, unparsable, timeout, answer_unparsable), completions scored since the previous step.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import fmean
from typing import Any

from reserve_occupy.trace import loads_bounded

from . import atomic_io
from .inputs import TRACE_LINE_BYTES, FileInputError, file_lines, json_reason
from .records import StepRecord


def step_row(r: StepRecord, prev: StepRecord | None) -> dict[str, Any]:
    prev_tokens = prev.tokens_generated if prev else 0
    hist = Counter(r.staleness)
    return {
        "step": r.step, "version": r.version, "time_s": round(r.time_s, 3),
        "reward": fmean(r.rollout_rewards) if r.rollout_rewards else None,
        "reward_trained": fmean(r.rewards) if r.rewards else None,
        "samples_completed": len(r.rollout_rewards),
        "staleness": {str(k): hist[k] for k in sorted(hist)},
        "staleness_mean": fmean(r.staleness) if r.staleness else 0.0,
        "token_lag_max": max(r.token_version_lag, default=0),
        "tokens_per_s": (r.tokens_generated - prev_tokens) / r.step_s if r.step_s > 0 else 0.0,
        "tokens_per_s_total": r.tokens_generated / r.time_s if r.time_s > 0 else 0.0,
        "tokens_generated": r.tokens_generated, "tokens_trained": r.tokens_trained,
        "trainer_idle": r.trainer_idle, "rollout_idle": r.rollout_idle,
        "step_s": r.step_s, "train_s": r.train_s, "sync_s": r.sync_s, "wait_s": r.wait_s,
        "tail_s": r.tail_s, "stream_s": r.stream_s, "streamed_units": r.streamed_units,
        **r.counts, **r.lengths,
        **{f"train/{k}": v for k, v in r.train.items()},
    }


@dataclass(frozen=True)
class Carried:
    """What the earlier incarnations of a resumed run measured, from the last row they wrote:
    a resumed run's ``time_s``, token counts, ``tokens_per_s_total`` and idle fractions go on
    from these instead of starting again at zero (the driver counts from its own start)."""

    time_s: float = 0.0
    tokens_generated: int = 0
    tokens_trained: int = 0
    trainer_idle_s: float = 0.0
    rollout_idle_s: float = 0.0

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Carried:
        def number(key: str) -> float:
            value = row.get(key)
            return value if isinstance(value, (int, float)) and math.isfinite(value) else 0

        t = float(number("time_s"))
        return cls(t, int(number("tokens_generated")), int(number("tokens_trained")),
                   number("trainer_idle") * t, number("rollout_idle") * t)

    def apply(self, row: dict[str, Any], record: StepRecord) -> None:
        """``row`` (this incarnation's, from ``record``) made cumulative over the whole run."""
        if self == Carried():
            return
        t = self.time_s + record.time_s
        generated = self.tokens_generated + record.tokens_generated
        row.update({
            "time_s": round(t, 3), "tokens_generated": generated,
            "tokens_trained": self.tokens_trained + record.tokens_trained,
            "tokens_per_s_total": generated / t if t > 0 else 0.0,
            "trainer_idle": ((self.trainer_idle_s + record.trainer_idle * record.time_s) / t
                             if t > 0 else 0.0),
            "rollout_idle": ((self.rollout_idle_s + record.rollout_idle * record.time_s) / t
                             if t > 0 else 0.0),
        })



def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl`` a resumed run continues. A last line that is not a
    JSON object is the row a crash tore and is dropped (docs/recovery.md, "The torn last
    line"); any other such line raises ``FileInputError`` (``PATH:LINE: why``; exit 2)."""
    rows: list[dict[str, Any]] = []
    for number, line, last in file_lines(path, TRACE_LINE_BYTES):
        try:
            row = loads_bounded(line)
            why = ("" if isinstance(row, dict) and isinstance(row.get("step"), int)
                   and not isinstance(row["step"], bool)
                   else "not an object with an integer step")
        except ValueError as exc:
            why = json_reason(exc)
        if why and last:
            break
        if why:
            raise FileInputError(path, number, f"not a metrics row ({why}); move the file "
                                 f"aside to resume without the earlier rows") from None
        rows.append(row)
    return rows

class MetricsSink:
    """The driver's ``on_step`` callback: writes each step and advances the progress bar.
    A resumed run (``append``) reports its time, tokens and idle fractions cumulatively over
    the whole run (``Carried``)."""

    def __init__(self, out_dir: Path, total_steps: int, progress: bool = True,
                 tensorboard: bool = False, append: bool = False,
                 counters: Callable[[], dict[str, float]] | None = None) -> None:
        """``append``: a resumed run adds to the rows its earlier incarnations wrote.
        ``counters``: cumulative counts (a reward's ``metrics()``), reported per step as the
        increase since the previous step."""
        self._counters = counters
        self._counted: dict[str, float] = dict(counters()) if counters is not None else {}
        out_dir.mkdir(parents=True, exist_ok=True)
        self.path = out_dir / "metrics.jsonl"
        self.rows: list[dict[str, Any]] = []
        if append and self.path.exists():
            self.rows = read_rows(self.path)
            atomic_io.write_text(self.path, "".join(json.dumps(r) + "\n" for r in self.rows))
        self.carried = Carried.from_row(self.rows[-1]) if self.rows else Carried()
        self._file = self.path.open("a" if append else "w")
        self._prev: StepRecord | None = None
        self._bar = None
        if progress:
            from tqdm import tqdm

            self._bar = tqdm(total=total_steps, desc="train", unit="step", dynamic_ncols=True,
                             initial=len(self.rows))
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise RuntimeError("run.tensorboard needs the tensorboard package "
                                   "(pip install tensorboard)") from None
            self._tb = SummaryWriter(str(out_dir / "tensorboard"))

    def recovered(self, step: int, figures: dict[int, tuple[int, dict[str, Any]]],
                  counts: dict[int, dict[str, int]] | None = None) -> None:
        """A resumed run that recovery brought to ``step`` steps: write a row (``recovered``:
        true) for each trained step whose row the crash cut short (the process died between
        the step's consume and its row). Its ``tokens_trained`` and ``train/*`` are those of
        recovery's retraining (``figures``: step -> (tokens, metrics)); what only the dead
        process measured (rewards, timings, staleness) is not known, and the cumulative
        figures go on from the previous row. A step recovery did not retrain (its checkpoint
        was committed before the crash) has the figures that checkpoint recorded; one without
        figures (an older checkpoint) gets a row that says ``tokens_unknown``: true, adds no
        tokens and has no ``train/*``. ``counts``: step -> the event log's unit and step counts
        right after that step's publish (``accounting.counts_at_publishes``); without them a
        row would carry the previous row's (before: step 9 said ``steps`` 9, ``trained`` 144
        where the log had 10 and 160)."""
        last = self.rows[-1] if self.rows and isinstance(self.rows[-1], dict) else {}
        done = last.get("step", -1)
        for k in range(done + 1 if isinstance(done, int) else step, step):
            tokens, metrics = figures.get(k, (0, {}))
            unknown = {"tokens_unknown": True} if k not in figures else {}
            row = {key: v for key, v in last.items()
                   if not key.startswith(("train/", "reward/")) and key != "tokens_unknown"}
            row.update({
                "step": k, "version": k, "recovered": True, "reward": None,
                "reward_trained": None, "samples_completed": 0, "staleness": {},
                "staleness_mean": 0.0, "token_lag_max": 0, "tokens_per_s": 0.0,
                "tokens_trained": self.carried.tokens_trained + tokens,
                **dict.fromkeys(("step_s", "train_s", "sync_s", "wait_s", "tail_s",
                                 "stream_s"), 0.0),
                "streamed_units": 0, **unknown, **(counts or {}).get(k, {}),
                **{f"train/{key}": v for key, v in metrics.items()}})
            self.carried = replace(self.carried,
                                   tokens_trained=self.carried.tokens_trained + tokens)
            self.rows.append(row)
            self._file.write(json.dumps(row) + "\n")
            last = row
            if self._bar is not None:
                self._bar.update(1)
        self._file.flush()

    def __call__(self, record: StepRecord) -> None:
        row = step_row(record, self._prev)
        self.carried.apply(row, record)
        self._prev = record
        if self._counters is not None:
            now = self._counters()
            row.update({k: v - self._counted.get(k, 0.0) for k, v in now.items()})
            self._counted = dict(now)
        self.rows.append(row)
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        if self._tb is not None:
            for key, value in row.items():
                if isinstance(value, (int, float)) and key != "step":
                    self._tb.add_scalar(key, value, record.step)
        if self._bar is not None:
            self._bar.update(1)
            reward = row["reward"]
            self._bar.set_postfix(reward="-" if reward is None else f"{reward:.3f}",
                                  stale=f"{row['staleness_mean']:.2f}",
                                  tok_s=f"{row['tokens_per_s_total']:.0f}")

    def close(self) -> None:
        self._file.close()
        if self._bar is not None:
            self._bar.close()
        if self._tb is not None:
            self._tb.close()


def _mean_of(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return fmean(values) if values else None


def summarize(rows: list[dict[str, Any]], log: dict[str, Any] | None = None,
              window: int = 5) -> dict[str, Any]:
    """The run in numbers. ``log``: ``accounting.LogCounts.summary()`` of the run's event log,
    the one source of every unit and step count (steps, groups admitted, trained, filtered,
    aborted by reason, released, the staleness histogram), with ``LengthLog.summary`` (the
    length bias of the log's fates joined with the samples' lengths); ``rows``
    (``metrics.jsonl``) give what only the driver measures: rewards over the first and last
    ``window`` steps, tokens, idle fractions, requests resumed. Without ``log`` the counts and
    the length bias come from the last row."""
    last = rows[-1] if rows else {}
    out: dict[str, Any] = {}
    if log is not None:
        out.update(log)
    else:
        hist: Counter[str] = Counter()
        for r in rows:
            hist.update(r["staleness"])
        out.update({"steps": len(rows), "staleness": dict(sorted(hist.items())),
                    **{k: last[k] for k in ("admitted", "aborted", "filtered", "released_stuck",
                                            "truncated", *LENGTH_KEYS) if k in last}})
    out["steps_with_metrics"] = len(rows)  # fewer than steps: a crash lost a step's row
    if not rows:
        return out
    w = min(window, max(1, len(rows) // 2))
    out.update({
        "wall_s": last["time_s"],
        "reward_first": _mean_of(rows[:w], "reward"), "reward_last": _mean_of(rows[-w:], "reward"),
        "reward_window": w,
        "token_lag_max": max(r["token_lag_max"] for r in rows),
        "tokens_per_s": last["tokens_per_s_total"], "tokens_generated": last["tokens_generated"],
        "tokens_trained": last["tokens_trained"],
        "trainer_idle": last["trainer_idle"], "rollout_idle": last["rollout_idle"],
        "resumed": last.get("resumed", 0),
        "steps_per_s": len(rows) / last["time_s"] if last["time_s"] > 0 else 0.0,
        "tail_s": _mean_of(rows, "tail_s"),
        "streamed_units": sum(r.get("streamed_units", 0) for r in rows),
    })
    return out


LENGTH_KEYS = ("length_ratio", "length_ks", "length_trained_mean", "length_admitted_mean",
               "samples_trained", "samples_admitted")


def _length_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The length bias as two table rows: the figures, and the mean length per sample fate."""
    if summary.get("length_ratio") is None:
        return []
    rows = [("length bias, trained / admitted", (
        f"{summary['length_ratio']:.3f} (KS {summary['length_ks']:.3f}; mean "
        f"{summary['length_trained_mean']:.1f} of {summary['length_admitted_mean']:.1f} tokens, "
        f"{summary['samples_trained']} of {summary['samples_admitted']} samples)"))]
    fates = summary.get("length_by_fate")
    if fates:
        rows.append(("response length by fate", ", ".join(
            f"{k}: {v['mean']:.1f} ({v['samples']})" for k, v in fates.items())))
    return rows


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def summary_table(summary: dict[str, Any], extra: dict[str, Any] | None = None) -> str:
    """A two-column text table of ``summary`` (and ``extra`` rows such as eval results)."""
    w = summary.get("reward_window", 0)
    labels = {
        "steps": "steps", "wall_s": "wall time of the steps (s)",
        "reward_first": f"reward, first {w} steps", "reward_last": f"reward, last {w} steps",
        "staleness": "staleness histogram (groups)", "token_lag_max": "max token-version lag",
        "tokens_per_s": "generated tokens/s", "tokens_trained": "trained tokens",
        "trainer_idle": "trainer idle (fraction)", "rollout_idle": "rollout idle (fraction)",
        "tail_s": "trainer's wait after the batch's last unit (s, mean)",
        "admitted": "groups admitted", "trained": "groups trained",
        "filtered": "groups filtered (no gradient)",
        "aborted": "groups aborted", "resumed": "requests resumed (partial rollout)",
        "released_stuck": "units released by the STUCK timeout",
        "truncated": "units truncated by the STUCK timeout (stuck_action truncate)",
    }
    rows = [(label, _fmt(summary.get(key))) for key, label in labels.items() if key in summary
            and (key != "truncated" or summary[key])]  # a row only in runs that truncated
    if summary.get("steps_with_metrics", summary.get("steps")) != summary.get("steps"):
        rows.insert(1, ("steps with a metrics row", _fmt(summary["steps_with_metrics"])))
    reasons = summary.get("aborted_by_reason")
    if reasons:
        rows = [(a, b + " (" + ", ".join(f"{k}: {v}" for k, v in reasons.items()) + ")"
                 if a == "groups aborted" else b) for a, b in rows]
    rows += _length_rows(summary)
    rows += [(k, _fmt(v)) for k, v in (extra or {}).items()]
    width = max(len(a) for a, _ in rows)
    return "\n".join(f"  {a:<{width}}  {b}" for a, b in rows)


def plot(rows: list[dict[str, Any]], path: Path, title: str = "") -> Path:
    """Reward (per step and a moving average) above the staleness composition of each batch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True,
                                   gridspec_kw={"height_ratios": [3, 2]})
    reward = [r["reward"] for r in rows]
    pts = [(s, v) for s, v in zip(steps, reward) if v is not None]
    if pts:
        xs, ys = zip(*pts)
        ax1.plot(xs, ys, ".", alpha=0.45, label="reward (all completed groups)")
        k = max(1, len(ys) // 8)
        avg = [fmean(ys[max(0, i - k + 1):i + 1]) for i in range(len(ys))]
        ax1.plot(xs, avg, "-", lw=2, label=f"moving average ({k} steps)")
    trained = [(s, r["reward_trained"]) for s, r in zip(steps, rows)
               if r["reward_trained"] is not None]
    if trained:
        ax1.plot(*zip(*trained), "-", lw=0.8, alpha=0.5, label="reward of trained samples")
    ax1.set_ylabel("reward")
    ax1.legend(loc="best", fontsize=8)
    ax1.grid(alpha=0.3)
    ax1.set_title(title or "reward and staleness over steps")
    levels = sorted({int(k) for r in rows for k in r["staleness"]})
    bottom = [0] * len(rows)
    for lvl in levels:
        counts = [r["staleness"].get(str(lvl), 0) for r in rows]
        ax2.bar(steps, counts, bottom=bottom, width=0.9, label=f"staleness {lvl}")
        bottom = [b + c for b, c in zip(bottom, counts)]
    ax2.set_xlabel("training step")
    ax2.set_ylabel("groups in batch")
    ax2.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    atomic_io.savefig(fig, path, dpi=110)
    plt.close(fig)
    return path
