"""The sharded trainer (``runtime.trainer.sharded``) against the single-process one, on CPU:
start-up, seconds per optimiser step on a fixed batch, export (gather + write) seconds per
step, the bf16-mixed update's distance from the single-process bf16-mixed one, and how late
the driver's event loop runs while a step trains (the GIL contention the rank processes
remove). Prints a table; nothing is asserted.

    python bench/sharded_bench.py [--worlds 1,2] [--steps 3] [--hidden 128 --layers 4]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.cli import Parser, float_in, in_path, int_in, int_list, out_path  # noqa: E402,F401


def _batch(trainer, version: int):
    from tests.runtime.test_grpo_streaming import _batch as make

    return make(trainer, version)


async def _lag_while(step) -> tuple[float, float]:
    """(step seconds, largest event-loop lateness in ms) while ``step()`` runs in a thread:
    a ticker asks for 1 ms sleeps and records how much later it wakes."""
    late: list[float] = []
    done = False

    async def ticker() -> None:
        while not done:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            late.append(time.perf_counter() - t - 0.001)

    task = asyncio.create_task(ticker())
    t0 = time.perf_counter()
    await asyncio.to_thread(step)
    took = time.perf_counter() - t0
    done = True
    await task
    return took, 1000 * max(late, default=0.0)


def main() -> None:
    ap = Parser(prog="sharded_bench.py", description=__doc__.splitlines()[0])
    ap.add_argument("--worlds", type=int_list(1, 64), default=[1, 2])
    ap.add_argument("--steps", type=int_in(1, 10**6), default=3)
    ap.add_argument("--hidden", type=int_in(8, 1 << 16), default=128)
    ap.add_argument("--layers", type=int_in(1, 1024), default=4)
    ap.add_argument("--out", default="out/sharded_bench")
    args = ap.parse_args()

    from runtime.rollout.env import configure

    configure()
    from safetensors.torch import load_file

    from runtime.config import TrainerConfig
    from runtime.models.tiny import TinySpec, ensure_tiny_model
    from runtime.trainer.grpo import GRPOTrainer
    from runtime.trainer.sharded import ShardedTrainer

    model = ensure_tiny_model(TinySpec(hidden_size=args.hidden, layers=args.layers,
                                       warmup_steps=0), log=None)
    out = Path(args.out)
    n_params = None
    rows = []
    for name in ["single", *(f"fsdp x{w}" for w in args.worlds)]:
        settings = TrainerConfig(lr=1e-3)
        t0 = time.perf_counter()
        if name == "single":
            tr = GRPOTrainer(model, settings, out / "single", seed=0)
            n_params = sum(p.numel() for p in tr.model.parameters())
            batches = [_batch(tr, v) for v in range(1, args.steps + 1)]
        else:
            tr = ShardedTrainer(model, settings, out / name.replace(" ", ""), seed=0,
                                world_size=int(name.split("x")[1]))
        start = time.perf_counter() - t0
        steps, lags, exports = [], [], []
        for v, b in enumerate(batches, 1):
            took, lag = asyncio.run(_lag_while(lambda b=b: tr._train(b)))
            steps.append(took)
            lags.append(lag)
            t0 = time.perf_counter()
            tr._export(v)
            exports.append(time.perf_counter() - t0)
        if hasattr(tr, "close"):
            tr.close()
        rows.append((name, start, statistics.median(steps), statistics.median(exports),
                     max(lags)))
    # bf16-mixed: the sharded update (MixedPrecisionPolicy bf16 params, fp32 reduce, autocast)
    # against the single-process one (fp32 weights, bf16 autocast), one step
    mixed = TrainerConfig(lr=1e-3, precision="bf16-mixed")
    ref = GRPOTrainer(model, mixed, out / "mixed-ref", seed=0)
    ref._train(batches[0])
    mixed_w = {}
    for world in (1, 2):
        sh = ShardedTrainer(model, mixed.model_copy(update={"strategy": "fsdp"}),
                            out / f"mixed-sh{world}", seed=0, world_size=world)
        try:
            sh._train(batches[0])
            mixed_w[world] = load_file(str(sh._export(1) / "model.safetensors"))
        finally:
            sh.close()
    w = mixed_w[2]
    fp32 = GRPOTrainer(model, TrainerConfig(lr=1e-3), out / "fp32-ref", seed=0)
    fp32._train(batches[0])
    import torch

    def apart(a, b):
        d = torch.cat([(a[k] - v.detach()).abs().flatten() for k, v in b.items()])
        return float(d.mean()), float(d.max())

    ref_sd = ref.model.state_dict()
    m_sh = apart(w, ref_sd)
    m_fp = apart({k: v.detach() for k, v in fp32.model.state_dict().items()}, ref_sd)
    m_12 = apart(mixed_w[2], mixed_w[1])

    print(f"model: hidden {args.hidden}, {args.layers} layers, {n_params / 1e6:.2f} M "
          f"parameters; {args.steps} steps of {sum(len(s.token_ids) for _, s in batches[0].samples)}"
          f" response tokens; CPU, gloo")
    print(f"{'trainer':<12}{'start s':>9}{'step s':>9}{'export s':>10}{'loop lag ms':>13}")
    for name, start, step, export, lag in rows:
        print(f"{name:<12}{start:>9.2f}{step:>9.3f}{export:>10.3f}{lag:>13.1f}")
    print(f"bf16-mixed after one step, |w - single-process bf16-mixed|: 2 ranks mean "
          f"{m_sh[0]:.2e} max {m_sh[1]:.2e}; single-process fp32 for scale: mean {m_fp[0]:.2e} "
          f"max {m_fp[1]:.2e}")
    print(f"bf16-mixed sharded, 2 ranks against 1 rank: mean {m_12[0]:.2e} max {m_12[1]:.2e}")


if __name__ == "__main__":
    main()
