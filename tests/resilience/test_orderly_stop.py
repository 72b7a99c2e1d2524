"""Prompt coverage after a resume does not depend on how the run stopped.

An orderly stop (the driver stops on a trainer error such as ``RankLost``, a Ctrl-C, another
error it handles) aborts the units still in flight with reason ``shutdown``; a process crash
writes nothing, and recovery aborts the same units as ``lost_in_crash``. Either way their
prompts were drawn from the stream and never trained, so ``--resume`` re-admits them
(``meta.readmit_of``) before any new prompt (docs/recovery.md, "Recovery" step 3).

The runs are the fault harness's (``reserve_occupy_faults.harness``): the production driver, durable
store and recovery on a virtual clock, the fake engine and the hash-chain trainer, every check
of ``reserve_occupy_faults.properties`` at the end. The same run is stopped at the same point twice:
by a lost trainer rank (orderly) and by a process crash just before the first write the orderly stop
made (its first ``shutdown`` abort), so both durable logs hold the same units in flight.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from reserve_occupy_faults.properties import check_conservation
from reserve_occupy_faults.harness import Run, Variant
from reserve_occupy_faults.schedule import Fault, Schedule
from runtime.recovery.journal import read_log
from runtime.recovery.resume import Recovery, _pending_readmits

BASE = Schedule(seed=3, eta=1, batch_size=2, group_size=2, candidates=3, capacity=3, engines=1,
                steps=6, commit_every=2)


def _run(tmp_path, schedule, name, variant=None):
    root = tmp_path / name
    root.mkdir()
    run = Run(schedule, root, variant or Variant())
    return run, run.run()


def _story(run):
    """(the log's events and metas, the units aborted as ``shutdown`` before the restart,
    re-admissions {lost unit: new unit}, the prompt positions trained in batch order, the
    prompt positions of the restart's reservations in order)."""
    log = read_log(run.root / "events.jsonl")
    stop = run.ev.crashes[0].events
    meta = {e.unit_id: log.metas.get(e.seq, {}) for e in log.events if e.op == "reserve"}
    stopped = [u for e in log.events[:stop] if e.op == "abort"
               and log.metas.get(e.seq, {}).get("reason") == "shutdown"
               for u in [e.unit_id, *e.aborted]]
    readmits = {m["readmit_of"]: u for u, m in meta.items() if "readmit_of" in m}
    trained = [meta[u]["prompt"] for e in log.events if e.op == "consume"
               for u in e.batch.unit_ids]
    after = [meta[e.unit_id]["prompt"] for e in log.events[stop:] if e.op == "reserve"]
    return log, stopped, readmits, trained, after


# Points where the orderly stop writes nothing but the reservations the admission task makes in
# the same instant and its shutdown aborts, so that a crash before its first abort leaves the
# same durable log (at others, a group also settles after the loss, and a crash one write
# later falls at another moment of the run).
@pytest.mark.parametrize("what, n", [("train", 1), ("train", 2), ("train", 5), ("train", 6)])
def test_an_orderly_stop_loses_no_prompt_a_crash_at_the_same_point_would_keep(tmp_path, what,
                                                                             n):
    orderly, out = _run(tmp_path, replace(BASE, faults=(
        Fault("rank_loss", what=what, arg=n, target=1),)), "orderly")
    assert out.ok, out.violations
    (loss,) = orderly.ev.rank_losses
    log_o, stopped, readmits_o, trained_o, after_o = _story(orderly)
    # After the loss the other tasks may still reserve or settle a group in the same instant;
    # the stop's aborts of what is in flight are its last writes.
    k = len(loss.writes_after) - len(stopped)
    assert stopped and loss.writes_after[k:] == ["log:abort"] * len(stopped)
    # The crash falls just before the orderly stop's first shutdown abort (1-based).
    first_abort = orderly.crash_log[0].lost_after + k + 1
    crashed, out = _run(tmp_path, replace(BASE, faults=(Fault("crash", target=first_abort),)),
                        "crashed")
    assert out.ok, out.violations
    cp = crashed.ev.crashes[0]
    log_c, _, readmits_c, trained_c, after_c = _story(crashed)
    # The same point: the same durable log, the same units in flight.
    assert cp.events == orderly.ev.crashes[0].events - len(stopped)
    assert log_c.events[:cp.events] == log_o.events[:cp.events]
    assert cp.in_flight == set(stopped)
    assert set(crashed.reports[0].lost) == set(stopped)
    # Both stops re-admit exactly the units they stopped, in the same order, before any new
    # prompt, and the stream goes on from the same draw: the same prompts are covered. (What
    # each run trains later may differ by timing: the crash fell a moment after the loss.)
    assert set(readmits_c) == set(stopped) and set(readmits_o) == set(stopped), (
        readmits_o, stopped)
    assert orderly.reports[0].stopped == stopped and orderly.reports[0].lost == []
    assert orderly.reports[0].readmit == crashed.reports[0].readmit == len(stopped)
    prompts = [log_o.metas[s]["prompt"] for _, s in _reserve_seqs(orderly, stopped)]
    assert after_o[:len(stopped)] == after_c[:len(stopped)] == prompts
    assert _first_draw(orderly) == _first_draw(crashed)
    assert trained_o[:len(trained_o) // 2] == trained_c[:len(trained_c) // 2]
    # A prompt is never trained twice for one draw: each re-admission is a new unit of a
    # unit that never trained.
    consumed = {u for e in log_o.events if e.op == "consume" for u in e.batch.unit_ids}
    assert not consumed & set(stopped)


class _DropStopped(Recovery):
    """The old behaviour: the units an orderly stop aborted are not re-admitted."""

    async def finish(self):
        recovered = await super().finish()
        pending = _pending_readmits(self.controller, self.reserve_meta, ("lost_in_crash",
                                                                          "recovered"))
        recovered.resume.readmit = pending
        return recovered


def test_the_conservation_check_catches_a_resume_that_drops_the_stopped_units(tmp_path):
    variant = Variant()
    variant.name, variant.recovery_class = "drop_stopped", _DropStopped
    run, out = _run(tmp_path, replace(BASE, faults=(
        Fault("rank_loss", what="train", arg=2, target=1),)), "dropped", variant)
    _, stopped, readmits, _, _ = _story(run)
    assert stopped and not set(readmits) & set(stopped)
    found, _ = check_conservation(run.ev)
    assert sorted(found) == sorted(
        f"unit {u!r} was aborted by an orderly stop (shutdown) before a restart but its "
        f"prompt {p} was never re-admitted" for u, p in
        ((u, read_log(run.root / "events.jsonl").metas[s]["prompt"])
         for u, s in _reserve_seqs(run, stopped))), found
    assert [v for v in out.violations if v.startswith("conservation:")]


def _reserve_seqs(run, units):
    log = read_log(run.root / "events.jsonl")
    seq = {e.unit_id: e.seq for e in log.events if e.op == "reserve"}
    return [(u, seq[u]) for u in units]


def _first_draw(run):
    """The draw number of the restart's first reservation from the prompt stream."""
    log = read_log(run.root / "events.jsonl")
    return next(log.metas[e.seq]["draw"] for e in log.events[run.ev.crashes[0].events:]
                if e.op == "reserve" and "draw" in log.metas[e.seq])


def _ctrl_c(cmd, out, after_publishes, timeout=180.0):
    """Start ``train``, and once its log shows ``after_publishes`` publishes and units in
    flight, send it SIGINT; returns its exit status once it has exited."""
    import signal
    import subprocess
    import time

    from ..procs import stop
    from .audit import kill_point, publishes
    from .test_kill_resume import ROOT, _env

    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                raise AssertionError("the run ended before the Ctrl-C:\n"
                                     + proc.stdout.read().decode()[-3000:])  # type: ignore
            assert time.monotonic() - t0 < timeout, "the run never reached the stop point"
            if publishes(out / "events.jsonl") >= after_publishes:
                stop(proc.pid)  # frozen: the log cannot change between this look and the signal
                try:
                    busy = bool(kill_point(out).in_flight)
                except Exception:  # a line being written: look again
                    busy = False
                if busy:
                    proc.send_signal(signal.SIGINT)
                proc.send_signal(signal.SIGCONT)
                if busy:
                    break
            time.sleep(0.02)
        return proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _shutdown_aborts(log):
    return [u for e in log.events if e.op == "abort"
            and log.metas.get(e.seq, {}).get("reason") == "shutdown"
            for u in [e.unit_id, *e.aborted]]


@pytest.mark.slow
def test_ctrl_c_and_resume_re_admits_the_stopped_units_prompts(tmp_path):
    """The real ``train`` command on the fake engine, stopped by Ctrl-C (SIGINT) with units in
    flight and resumed with ``--resume``: the stop aborted them as ``shutdown``, the resume
    re-admitted each of their prompts, and the final log is one valid trace (the audit:
    ``check-trace`` strict, conservation with the stop as a restart point, eta)."""
    from .audit import audit_run, kill_point
    from .test_kill_resume import FAKE, _cmd, _resume

    steps, eta = 10, 2
    # Tokens slow enough that the groups in flight at the signal are still generating when
    # the interrupt reaches the driver; should they all finish first anyway (a loaded
    # machine), nothing is aborted and the run is tried again in a fresh directory.
    settings = {**FAKE, "rollout.fake_token_s": 0.03, "run.steps": steps,
                "staleness.max_staleness": eta, "run.seed": 7}
    for attempt in range(3):
        out = tmp_path / f"run{attempt}"
        cmd = _cmd(out, settings)
        assert _ctrl_c(cmd, out, after_publishes=3) == 130
        stopped = _shutdown_aborts(read_log(out / "events.jsonl"))
        if stopped:
            break
    assert stopped, "three Ctrl-Cs found no unit in flight"
    point = kill_point(out)
    assert point.version < steps and not point.in_flight
    resumed = _resume(cmd, out, 180)
    problems, _ = audit_run(out, eta, steps, [point], token_versions=True)
    assert problems == [], "\n".join(problems[:20])
    log = read_log(out / "events.jsonl")
    readmitted = {log.metas[e.seq]["readmit_of"]: e.unit_id for e in log.events
                  if e.op == "reserve" and "readmit_of" in log.metas.get(e.seq, {})}
    assert set(stopped) <= set(readmitted), (stopped, readmitted)
    prompt = {e.unit_id: log.metas[e.seq]["prompt"] for e in log.events if e.op == "reserve"}
    assert all(prompt[readmitted[u]] == prompt[u] for u in stopped)
    assert f"{len(stopped)} units in flight when the run last stopped" in resumed, resumed
