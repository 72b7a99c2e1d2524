"""``make proofs-deep``: the long runs that do not fit in ``pytest proofs/``.

1. Exhaustive model checking of the real controller for a configuration with more than a
   million distinct states (by default eta=4, batch_size=2, capacity=2, no concurrency limit):
   every invariant on every new state, the per-edge checks on every edge, deadlock and both
   progress properties over the whole graph. Prints progress and the distinct-state count.
2. The same with streaming consume (``Config.streaming``: ``stream`` and its refusals in the
   alphabet) for a configuration beyond ``pytest proofs/``'s (default eta=2, B=3, C=3, M=2;
   ``--streaming-config``, or ``none`` to skip it).
3. With ``--z3``: the counter-abstraction proofs for eta up to ``--z3-eta`` (every capacity and
   batch size) and the slot-level proofs for the larger shapes of ``DEEP_SLOT_SHAPES``.

Exit status 0 only if everything held (and at least ``--min-states`` states were explored).
"""

from __future__ import annotations

import argparse
import sys
import time

from reserve_occupy import Config

from .modelcheck import ModelChecker

DEEP_SLOT_SHAPES = [(1, 4), (6, 1), (1, 5), (2, 3), (3, 2)]


def _config(text: str) -> Config:
    parts = [int(x) if x != "None" else None for x in text.split(",")]
    return Config(*parts)  # type: ignore[arg-type]


def model_check(config: Config, min_states: int = 1) -> bool:
    def progress(states: int, edges: int, depth: int, seconds: float) -> None:
        print(f"  {states:>9,} states  {edges:>11,} edges  depth {depth:>3}  {seconds:7.0f}s  "
              f"({states / max(seconds, 1e-9):,.0f} states/s)", flush=True)

    print(f"model checking the real StalenessController, {config}", flush=True)
    mc = ModelChecker(config, check_every_edge=False, conformance=False, liveness=True,
                      progress=progress, progress_every=100_000)
    r = mc.run()
    print(r.summary(), flush=True)
    print(f"DISTINCT STATES: {r.states:,}", flush=True)
    if r.violation is not None:
        print(r.violation.render())
        return False
    if r.states < min_states:
        print(f"fewer than {min_states:,} states: choose a larger --config")
        return False
    return True


def _prove_all(prover, label: str) -> bool:
    """Initiation and every operation's consecution for one prover; prints one line and the
    counterexample of each obligation not proved."""
    from .spec_model import Operations

    t = time.perf_counter()
    outs = prover.initiation()
    for op in Operations.NAMES:
        outs += prover.consecution(op)
    bad = [o for o in outs if not o.proved]
    print(f"Z3 {label}: {len(outs)} obligations, "
          f"{'all proved' if not bad else f'{len(bad)} NOT PROVED'} in "
          f"{time.perf_counter() - t:.0f}s", flush=True)
    for o in bad:
        print(f"  {o.op} / {o.prop}: {o.result}\n{o.counterexample}")
    return not bad


def z3_proofs(max_eta: int) -> bool:
    from .counter_model import CounterProver
    from .spec_model import Shape
    from .z3_model import Prover

    ok = True
    for eta in range(max_eta + 1):
        ok &= _prove_all(CounterProver(eta, timeout_ms=1_800_000),
                         f"counter model eta={eta}, every C >= B >= 1")
    for eta, cap in DEEP_SLOT_SHAPES:
        ok &= _prove_all(Prover(Shape(eta, cap), timeout_ms=1_800_000),
                         f"slot model eta={eta} C={cap}, every B <= C")
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m proofs.deep", description=__doc__.split("\n")[0])
    ap.add_argument("--config", type=_config, default=Config(4, 2, 2),
                    help="eta,batch_size,capacity[,max_concurrency] (default 4,2,2)")
    ap.add_argument("--min-states", type=int, default=1_000_000)
    ap.add_argument("--streaming-config", default="2,3,3,2",
                    help="eta,batch_size,capacity[,max_concurrency] checked with streaming on "
                         "(default 2,3,3,2; 'none' skips it)")
    ap.add_argument("--z3", action="store_true", help="also run the deep Z3 proofs")
    ap.add_argument("--z3-eta", type=int, default=6, help="largest eta for the counter model")
    ap.add_argument("--skip-model-check", action="store_true")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    ok = True
    if not args.skip_model_check:
        ok &= model_check(args.config, args.min_states)
        if args.streaming_config != "none":
            base = _config(args.streaming_config)
            ok &= model_check(Config(base.max_staleness, base.batch_size, base.capacity,
                                     base.max_concurrency, streaming=True))
    if args.z3:
        ok &= z3_proofs(args.z3_eta)
    print(f"proofs-deep: {'OK' if ok else 'FAILED'} in {time.perf_counter() - start:.0f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
