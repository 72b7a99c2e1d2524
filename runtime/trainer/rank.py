"""One rank of the sharded GRPO trainer (``runtime.trainer.sharded``): a process of its own,
started by the driver's ``ShardedTrainer``, that runs ``GRPOTrainer``'s update on an FSDP2 model.

What changes from the single-process trainer, and nothing else (``RankTrainer`` overrides):

* The model: ``fully_shard`` on every decoder layer (the model's ``_no_split_modules``) and on
  the root, over a one-dimensional device mesh of the ranks; ``trainer.precision bf16-mixed``
  adds ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)`` (the forward keeps
  the single-process trainer's bfloat16 autocast as well); ``gradient_checkpointing`` is the
  model's own, per decoder layer.
* The rows: every rank receives the whole batch and trains its own share of each minibatch,
  the rows dealt by tokens (``assign``: longest first to the rank with the fewest tokens), not
  by count.
* The normaliser: the loss stays the token mean over the whole minibatch, all ranks together.
  Each rank divides its rows' summed loss by the minibatch's token count (which every rank
  knows, having the whole batch), and FSDP's gradient reduction *sums* over the ranks
  (``set_gradient_divide_factor(1.0)``; by default it averages, which would divide the update
  by the world size). Streamed chunks are split the same way; ``_finish_step`` divides by the
  batch's token count as before.
* Lock step: FSDP gathers each layer's parameters in every forward, so every rank must make
  as many forward/backward passes; a rank with fewer micro-batches pads with empty ones (one
  pad token, no response token: no loss, a zero gradient).
* Metrics: the per-rank sums are all-reduced (``ratio_max``, ``corr_ratio_max`` by maximum).
* The proximal log-probabilities of decoupled PPO (``trainer.correction.prox: recompute``): each
  rank scores its share of the rows and the ranks exchange them (``_with_prox``).
* Weights: ``export`` gathers the weights one tensor at a time (``DTensor.full_tensor``) and
  rank 0 streams each into ``model.safetensors`` as it arrives
  (``runtime.trainer.safetensors_writer``), so it holds its shards plus one whole tensor, never
  the whole model; the directory is the one the single-process trainer writes.
* Checkpoints: model and optimizer as a ``torch.distributed.checkpoint`` directory
  (``sharded/``, each rank writing its shards; loadable at any world size), next to the
  consolidated model (``model.safetensors``, ``config.json``, the tokenizer: a directory
  transformers and vLLM load), the whole written atomically by rank 0 (``atomic_io.atomic_dir``).

The control channel: one pipe per rank from the driver; a message is ``(command, args)``, each
rank answers ``("ok", result)`` or ``("error", type name, message, traceback, errno, alike)``
(``_send_error``; ``alike``: whether every rank raises it alike, ``raised_alike``). Every rank
runs every command, so collectives line up.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from .. import atomic_io
from . import safetensors_writer
from .base import INPUT_ERRORS, NonFiniteStep
from .checkpoint_io import check_keys, tied_keys
from .dcp import SHARDED_DIR, checkpoint_error, load_dcp, save_dcp
from .grpo import GRPOTrainer

# The per-rank metric sums of ``GRPOTrainer._minibatch`` that add up over ranks.
SUM_KEYS = ("tokens", "loss", "clipped", "ratio", "kl_behaviour", "kl_ref", "onpolicy_err",
            "onpolicy_n", "corr_ratio", "corr_weight", "corr_weight_sq", "corr_truncated",
            "corr_masked")
MAX_KEYS = ("ratio_max", "corr_ratio_max")  # ... and those that take the maximum
STATE_NAME = "trainer_state.json"
STARTUP_S = 600.0  # the collective timeout while the ranks start (load and shard the model)
# The attribute that marks an exception every rank raises alike at the same point of a command
# after its collectives (NonFiniteStep after the shared check): ``raised_alike``.
ALIKE = "_raised_by_every_rank"


def assign(rows: list[tuple], world: int) -> list[list[int]]:
    """The row indices each rank trains, balanced by tokens (prompt and response: what a
    forward pass costs): longest row first, each to the rank with the fewest tokens so far
    (ties: the lowest rank); each rank's rows in their original order. Deterministic, so
    every rank computes the same split."""
    load = [0] * world
    out: list[list[int]] = [[] for _ in range(world)]
    by_cost = sorted(range(len(rows)), key=lambda i: (-(len(rows[i][0]) + len(rows[i][1])), i))
    for i in by_cost:
        r = min(range(world), key=lambda k: (load[k], k))
        out[r].append(i)
        load[r] += len(rows[i][0]) + len(rows[i][1])
    return [sorted(x) for x in out]


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules ``fully_shard`` wraps one by one: those of the classes the model names in
    ``_no_split_modules`` (Hugging Face's decoder layers)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(f"{type(model).__name__}: no decoder layers to shard (the model names "
                         f"none in _no_split_modules)")
    return layers


class RankTrainer(GRPOTrainer):
    """``GRPOTrainer`` on one rank of an FSDP2 process group (see the module's docstring)."""

    def __init__(self, rank: int, world: int, *args: Any, **kwargs: Any) -> None:
        self.rank, self.world = rank, world
        self._plan: list[list[int]] | None = None
        super().__init__(*args, **kwargs)

    # ------------------------------------------------------------------ the model -----------

    def _wrap_model(self) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

        mesh = self.mesh = init_device_mesh(self.device.type, (self.world,))
        policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
                  if self.precision == "bf16-mixed" else MixedPrecisionPolicy())
        for layer in decoder_layers(self.model):
            fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(self.model, mesh=mesh, mp_policy=policy)
        if self.ref is not None:
            # The KL reference (trainer.kl_coef > 0) sharded as the model: every rank runs its
            # forward in every minibatch, so its gathers line up. Its parameters keep their
            # dtype (no param_dtype cast): under bf16-mixed the single-process trainer runs the
            # reference's float32 weights under bfloat16 autocast, and so does this.
            for layer in decoder_layers(self.ref):
                fully_shard(layer, mesh=mesh)
            fully_shard(self.ref, mesh=mesh)
        for module in self.model.modules():
            if isinstance(module, FSDPModule):
                # sum over ranks (see _minibatch), as a plain SUM (gloo has no PREMUL_SUM)
                module.set_gradient_divide_factor(1.0)
                module.set_force_sum_reduction_for_comms(True)

    def set_timeout(self, seconds: float) -> None:
        """How long a collective waits for the other ranks before it raises
        (``trainer.collective_timeout_s``): a rank that hangs fails the step on the others."""
        from torch.distributed.distributed_c10d import _get_default_group, _set_pg_timeout

        groups = {id(g): g for g in (_get_default_group(), self.mesh.get_group())}
        for group in groups.values():
            _set_pg_timeout(timedelta(seconds=seconds), group)

    def collectives(self) -> int | None:
        """How many collectives this rank has issued so far (the sequence numbers of its
        process groups, which gloo and NCCL advance at every collective, FSDP's gathers
        included); None where the backend keeps none. ``main`` compares it before and after a
        command that raised: see ``raised_alike``."""
        from torch.distributed.distributed_c10d import _get_default_group

        try:
            groups = {id(g): g for g in (_get_default_group(), self.mesh.get_group())}
            return sum(int(g._get_sequence_number_for_group()) for g in groups.values())
        except Exception:  # noqa: BLE001 - a backend without one (or no group): unknown
            return None

    # ------------------------------------------------------------------ the update ----------

    def _micro_batches(self, prompts: list[list[int]], responses: list[list[int]]
                       ) -> list[list[int]]:
        if self._plan is not None:  # _minibatch's plan for its padded rows (used once)
            plan, self._plan = self._plan, None
            return plan
        return super()._micro_batches(prompts, responses)

    def _padded(self, mine: list[tuple]) -> list[tuple]:
        """``mine`` and as many empty rows as make this rank's forward/backward passes as many
        as the rank with the most; the plan for them is left for ``_micro_batches``."""
        plan = super()._micro_batches([r[0] for r in mine], [r[1] for r in mine])
        n = torch.tensor([len(plan)], dtype=torch.long, device=self._comm_device())
        dist.all_reduce(n, op=dist.ReduceOp.MAX)
        extra = int(n.item()) - len(plan)
        empty = ([self.pad_id], [], [], [], 0.0)  # no response token: no loss, zero gradient
        self._plan = plan + [[len(mine) + k] for k in range(extra)]
        return mine + [empty] * extra

    def _minibatch(self, rows: list[tuple], version: int, sums: dict[str, float],
                   first: bool, n_tokens: float | None = None) -> None:
        """This rank's share of ``rows`` (the whole minibatch, the same on every rank), its
        loss divided by the whole minibatch's ``n_tokens``; the sums all-reduced."""
        if n_tokens is None:  # every rank holds the whole minibatch: no all-reduce needed
            n_tokens = float(sum(len(r[1]) for r in rows))  # the whole minibatch's
        mine = [rows[i] for i in assign(rows, self.world)[self.rank]]
        local: dict[str, float] = {}
        divisor = self._divisor(n_tokens, mine)
        super()._minibatch(self._padded(mine), version, local, first, n_tokens=divisor)
        dev = self._comm_device()
        total = torch.tensor([local.get(k, 0.0) for k in SUM_KEYS], dtype=torch.float64,
                             device=dev)
        dist.all_reduce(total)
        top = torch.tensor([local.get(k, 0.0) for k in MAX_KEYS], dtype=torch.float64,
                           device=dev)
        dist.all_reduce(top, op=dist.ReduceOp.MAX)
        for k, v in zip(SUM_KEYS, total.tolist()):
            if k in local or v:
                sums[k] = sums.get(k, 0.0) + v
        for k, v in zip(MAX_KEYS, top.tolist()):
            if k == "ratio_max" or self.correction is not None:
                sums[k] = max(sums.get(k, 0.0), v)

    def _with_prox(self, rows: list[tuple]) -> list[tuple]:
        """The proximal log-probabilities (decoupled PPO, ``prox: recompute``): this rank
        scores its share of ``rows`` (``assign``, padded to as many forward passes as the
        other ranks make: FSDP gathers in every one), then the ranks exchange their shares,
        so each holds every row's (a later minibatch or epoch may deal it any row)."""
        idx = assign(rows, self.world)[self.rank]
        mine = [rows[i] for i in idx]
        padded = self._padded(mine)  # the plan for them is _micro_batches' next answer
        lps = self.score([r[0] for r in padded], [r[1] for r in padded])
        found: list[Any] = [None] * self.world
        dist.all_gather_object(found, list(zip(idx, lps[:len(mine)])))
        prox = {i: lp for part in found for i, lp in part}
        return [(*r[:6], prox[i]) for i, r in enumerate(rows)]

    def _divisor(self, n_tokens: float, mine: list[tuple]) -> float:
        """What this rank divides its rows' summed loss by: the whole minibatch's tokens
        (the ranks' gradients are then summed). A test overrides it with the per-rank mean."""
        return n_tokens

    def _optimizer_step(self) -> float:
        for group in self.opt.param_groups:
            group["lr"] = self.lr()
        params = [p for p in self.model.parameters() if p.grad is not None]
        limit = self.s.max_grad_norm if self.s.max_grad_norm is not None else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, limit)  # DTensor grads: a global norm
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        self._share_non_finite(float(norm))
        try:
            self._refuse_non_finite(float(norm))  # every rank alike, with the same message
        except NonFiniteStep as exc:
            setattr(exc, ALIKE, True)  # after the shared check: every rank raises it here
            raise
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return float(norm)

    def _share_non_finite(self, norm: float) -> None:
        """Every rank learns the units whose loss any rank found NaN or infinite (one flag
        all-reduced per step; the units gathered only then), so all raise the same
        ``NonFiniteStep`` or none does. ``norm`` is the global norm, the same on every rank."""
        flag = torch.tensor([1.0 if self._non_finite else 0.0], device=self._comm_device())
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if not flag.item() and norm == norm and abs(norm) != float("inf"):
            return
        found: list[Any] = [None] * self.world
        dist.all_gather_object(found, (self._non_finite, self._grad_units))
        bad: list[Any] = []
        units: list[Any] = []
        for part_bad, part_units in found:
            bad += [u for u in part_bad if u not in bad]
            units += [u for u in part_units if u not in units]
        self._non_finite, self._grad_units = bad, units

    def _comm_device(self) -> torch.device:
        return self.device if self.device.type == "cuda" else torch.device("cpu")

    # ------------------------------------------------------------------ weights -------------

    def _gatherer(self) -> tuple[list[tuple[str, torch.dtype, tuple[int, ...]]],
                                 Callable[[str], torch.Tensor]]:
        """The weights as (entries, fetch): each tensor's (name, dtype, global shape), tied
        weights once as ``save_pretrained`` stores them, and ``fetch(name)``, the whole tensor
        (a collective for a sharded one: every rank calls it, in ``safetensors_writer.plan``'s order).

        The seam for another transport: the file (``_write_full``) is one consumer; an NCCL
        broadcast from rank 0 to the engines' workers (docs/ray.md, "Weights to the engines")
        would walk the same plan, sending each tensor as it is gathered."""
        tied = tied_keys(self.model)
        tensors, seen = {}, set()
        for k, v in self.model.state_dict(keep_vars=True).items():
            if k in tied or id(v) in seen:  # a tied weight is one Parameter under two names
                continue
            seen.add(id(v))
            tensors[k] = v

        @torch.no_grad()
        def fetch(name: str) -> torch.Tensor:
            v = tensors[name]
            return v.full_tensor() if isinstance(v, DTensor) else v.detach()

        return [(k, v.dtype, tuple(v.shape)) for k, v in tensors.items()], fetch

    def _write_full(self, path: Path | None) -> None:
        """The full weights as the Hugging Face directory ``GRPOTrainer._write_model`` writes,
        at ``path`` (rank 0; None on the others); a collective. Gathered one tensor at a time
        (``_gatherer``) and streamed into ``model.safetensors``
        (``runtime.trainer.safetensors_writer``): rank 0 holds its shards plus one whole tensor,
        never the whole model."""
        entries, fetch = self._gatherer()
        if path is None:  # the other ranks take part in each gather, in the order of rank 0's
            for name, _, _ in safetensors_writer.plan(entries):
                fetch(name)
            return
        # A write that fails (a full disk: OSError) fails rank 0's answer; the driver then
        # stops every rank (runtime.trainer.sharded), so none is left waiting in a gather.
        path.mkdir(parents=True, exist_ok=True)
        safetensors_writer.write_file(path / "model.safetensors", entries, fetch,
                                      metadata={"format": "pt"})
        self.model.config.save_pretrained(path)
        gen = getattr(self.model, "generation_config", None)
        if gen is not None:
            gen.save_pretrained(path)

    def _export(self, version: int) -> Path:
        root = self.out_dir / "weights"
        path = root / f"v{version}"
        if self.rank == 0:
            with atomic_io.atomic_dir(path) as tmp:
                self._write_full(tmp)
        else:
            self._write_full(None)
        if self.rank == 0:
            old = root / f"v{version - self.keep_weights}"
            if version - self.keep_weights >= 0 and old.exists():
                import shutil

                shutil.rmtree(old, ignore_errors=True)
        dist.barrier()  # the directory is complete before any rank answers
        return path

    # ------------------------------------------------------------------ checkpoints ---------

    def _save(self, path: Path) -> None:
        """A collective. A failure on any rank (a full disk: ``OSError``) is raised on rank 0
        inside ``atomic_dir``, which removes the directory every rank wrote into; a rank the
        driver kills meanwhile leaves it to the driver (``sharded.remove_rank_temps``)."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(self.model, self.opt)
        with contextlib.ExitStack() as stack:
            where: list[Any] = [None]
            if self.rank == 0:
                where[0] = str(stack.enter_context(atomic_io.atomic_dir(path)))
            dist.broadcast_object_list(where, src=0)
            tmp = Path(where[0])
            save_dcp({"model": model_sd, "optim": optim_sd}, tmp / SHARDED_DIR)
            self._write_full(tmp if self.rank == 0 else None)
            if self.rank == 0:
                self.tokenizer.save_pretrained(tmp)
                atomic_io.write_text(tmp / STATE_NAME, json.dumps(
                    {"steps": self.steps, "precision": self.precision, "world_size": self.world,
                     "format": "fsdp2-dcp"}))
        dist.barrier()

    def _load(self, path: Path) -> None:
        """A sharded checkpoint at any world size, or one the single-process trainer wrote
        (``model.safetensors`` and ``optimizer.pt``: read whole by every rank, then sharded)."""
        if (path / SHARDED_DIR).is_dir() and (path / STATE_NAME).is_file():
            load_dcp(self.model, self.opt, path)
            self.steps = json.loads((path / STATE_NAME).read_text())["steps"]
            return
        from .checkpoint_io import CHECKPOINT_FILES

        missing = [n for n in CHECKPOINT_FILES if not (path / n).exists()]
        if missing:
            raise FileNotFoundError(f"{path}: not a checkpoint (no {SHARDED_DIR}/, and missing "
                                    f"{', '.join(missing)})")
        from safetensors.torch import load_file
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        weights = load_file(str(path / "model.safetensors"))
        check_keys(self.model, weights.keys(), path)  # on every rank, before anything loads
        # strict=False for the tied weight only (stored once): check_keys refused the rest
        set_model_state_dict(self.model, weights,
                             options=StateDictOptions(full_state_dict=True, strict=False))
        # optimizer.pt numbers the parameters in model.parameters() order, which fully_shard
        # keeps; the full optimizer state is keyed by their names
        names = [n for n, _ in self.model.named_parameters()]
        plain = torch.load(path / "optimizer.pt", map_location="cpu")
        named = {"state": {names[i]: v for i, v in plain["state"].items()},
                 "param_groups": [{**g, "params": [names[i] for i in g["params"]]}
                                  for g in plain["param_groups"]]}
        set_optimizer_state_dict(self.model, self.opt, named,
                                 options=StateDictOptions(full_state_dict=True))
        self.steps = json.loads((path / STATE_NAME).read_text())["steps"]


def _local_bytes(t: torch.Tensor) -> int:
    """Bytes this process holds of ``t``: a DTensor's local shard, a plain tensor whole."""
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def state_bytes(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, int]:
    """This process's training state, in bytes of the tensors it holds: parameters, their
    gradients (one per trainable parameter, the parameter's local shape: what backward
    allocates; the step frees them) and the optimiser's state (AdamW's moments, as stepped)."""
    params = list(model.parameters())
    return {"params": sum(_local_bytes(p) for p in params),
            "grads": sum(_local_bytes(p) for p in params if p.requires_grad),
            "optim": sum(_local_bytes(v) for st in opt.state.values() for v in st.values()
                         if isinstance(v, torch.Tensor))}


def peak_rss_bytes() -> int:
    """This process's resident-set high-water mark (VmHWM; ``ru_maxrss`` where there is no
    /proc)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024


# ---------------------------------------------------------------------- the rank process ----

def _loopback_env(device_type: str) -> None:
    """Gloo and NCCL bind their connections to the loopback interface (127.0.0.1 only)."""
    lo = "lo0" if sys.platform == "darwin" else "lo"
    os.environ.setdefault("GLOO_SOCKET_IFNAME", lo)
    os.environ.setdefault("NCCL_SOCKET_IFNAME", lo)


def cuda_index(rank: int, spec: dict[str, Any]) -> int:
    """The rank's GPU among those its process sees: local ranks share the machine's
    (``cuda:rank``); a Ray rank actor sees only its own, Ray having set
    ``CUDA_VISIBLE_DEVICES`` to the GPU its bundle holds, so its launcher passes
    ``cuda_index`` 0 (runtime.ray_backend.ranks)."""
    return int(spec.get("cuda_index", rank))


def main(rank: int, world: int, port: int, conn: Any, spec: dict[str, Any]) -> None:
    """A rank's process: join the group (the driver's store on 127.0.0.1:``port``), build the
    trainer, answer ready, then serve commands until ``close`` or the driver's end closes."""
    from ..machine_checks import resolve_device

    device = resolve_device(spec["settings"].device)
    if spec.get("master_addr", "127.0.0.1") in ("127.0.0.1", "localhost", "::1"):
        _loopback_env(device)  # on Ray across hosts, the nodes' own interfaces
    try:
        if device.startswith("cuda"):
            index = cuda_index(rank, spec)
            torch.cuda.set_device(index)
            settings = spec["settings"].model_copy(update={"device": f"cuda:{index}"})
            backend = "nccl"
        else:
            settings, backend = spec["settings"], "gloo"
        # Start-up (loading the model, the first collectives) may take minutes on a busy
        # machine: its own timeout; the configured one from the first command on.
        startup = timedelta(seconds=max(spec["timeout_s"], STARTUP_S))
        # the store's host: the driver's 127.0.0.1, or rank 0's node on Ray (runtime.ray_backend)
        store = dist.TCPStore(spec.get("master_addr", "127.0.0.1"), port, is_master=False,
                              timeout=startup)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                                timeout=startup)
        module, _, name = spec["rank_class"].partition(":")
        cls = getattr(importlib.import_module(module), name)
        trainer = cls(rank, world, spec["model_path"], settings, spec["out_dir"],
                              spec["temperature"], seed=spec["seed"],
                              keep_weights=spec["keep_weights"],
                              total_steps=spec["total_steps"])
        trainer.set_timeout(spec["timeout_s"])
        conn.send(("ok", os.getpid()))
    except BaseException as exc:  # noqa: BLE001 - reported to the driver, then exit
        _send_error(conn, exc)
        return
    commands = {
        "train": lambda b: (trainer._train(b), trainer.steps),
        "accumulate": lambda c: trainer._accumulate(c),
        "finish": lambda b: (trainer._finish_step(b), trainer.steps),
        "discard": lambda: trainer._discard(),
        "export": lambda v: str(trainer._export(v)),
        "save": lambda p: (trainer._save(Path(p)), trainer.steps)[1],
        "load": lambda p: (trainer._load(Path(p)), trainer.steps)[1],
        "memory": lambda: {"pid": os.getpid(), "peak_rss": peak_rss_bytes(),
                           **state_bytes(trainer.model, trainer.opt),
                           # the KL reference's weights this rank holds (0 without one)
                           "ref": sum(_local_bytes(p) for p in trainer.ref.parameters())
                           if trainer.ref is not None else 0,
                           **({"cuda_peak": torch.cuda.max_memory_allocated(trainer.device)}
                              if trainer.device.type == "cuda" else {})},
    }
    while True:
        try:
            cmd, args = conn.recv()
        except (EOFError, OSError):  # the driver is gone
            break
        if cmd == "close":
            conn.send(("ok", None))
            break
        before = trainer.collectives()
        try:
            conn.send(("ok", commands[cmd](*args)))
        except BaseException as exc:  # noqa: BLE001 - the driver raises it (rank_error)
            # not only Exception: torch's CheckpointException is a BaseException, and a
            # rank that let one (or a SystemExit) through would die with a traceback
            _send_error(conn, exc, raised_alike(exc, before, trainer.collectives()))
    with contextlib.suppress(Exception):
        dist.destroy_process_group()


def error_kind(exc: BaseException) -> str:
    """The name the driver sees for ``exc``: the nearest class of it that the driver takes for
    bad input (``sharded._INPUT_ERRORS``), so a subclass such as ``TokenBudgetError`` (a
    ``ValueError``) leaves the trainer usable, as in one process; else its own class name."""
    return next((c.__name__ for c in type(exc).__mro__ if c.__name__ in INPUT_ERRORS
                 and c is INPUT_ERRORS[c.__name__]), type(exc).__name__)


def rank_error(exc: BaseException) -> BaseException:
    """The error a rank reports for ``exc`` (what ``_send_error`` sends): torch's
    ``CheckpointException``, a ``BaseException`` gathering every rank's failure of a DCP save
    or load, is the error behind it (``dcp.checkpoint_error``: a full disk on any rank, that
    ``OSError``); anything else is itself. The driver then raises an ``OSError`` whose errno
    says the output cannot be written as that ``OSError`` (the CLI's exit 74), an input error
    every rank raised as it is (as in one process), and anything else as ``RankLost``
    (``train``: "the run failed", exit 1): ``sharded.answer_values``."""
    return checkpoint_error(exc)


def raised_alike(exc: BaseException, before: int | None, after: int | None) -> bool:
    """Whether every rank raises ``exc`` alike, so none is left waiting in a collective: it
    was raised before the command's first collective (``before == after``, the rank's
    ``collectives()`` when the command began and when it raised: every rank checks the same
    input with the same code), or at a point every rank reaches together (marked ``ALIKE``:
    ``NonFiniteStep`` after the shared check; torch's ``CheckpointException``, which DCP
    raises on every rank, also as the error behind it that ``dcp.save_dcp``/``load_dcp``
    raise in its place, found through ``__cause__``). Otherwise the rank raised mid-command,
    alone: the others may be waiting in a collective it will not join (until
    ``collective_timeout_s``), so the driver stops them at once (``sharded.fatal_answer``).
    Unknown counts (None): alike, as before."""
    from torch.distributed.checkpoint.api import CheckpointException

    if before is None or after is None or before == after or getattr(exc, ALIKE, False):
        return True
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:  # (a cycle of causes ends the walk)
        if isinstance(cause, CheckpointException):
            return True
        seen.add(id(cause))
        cause = cause.__cause__
    return False


def _send_error(conn: Any, exc: BaseException, alike: bool = True) -> None:
    """``("error", kind, text, traceback, errno, alike)`` for ``rank_error(exc)``: errno an
    ``OSError``'s (a full disk: the driver raises it as one, ``sharded.output_error``), else
    None; text the error's message, or its ``repr`` when it has none or is not an
    ``Exception`` (``SystemExit(3)``, not ``3``); ``alike``: ``raised_alike``."""
    exc = rank_error(exc)
    text = str(exc) if isinstance(exc, Exception) and str(exc) else repr(exc)
    with contextlib.suppress(Exception):
        conn.send(("error", error_kind(exc), text,
                   "".join(traceback.format_exception(exc))[-4000:],
                   exc.errno if isinstance(exc, OSError) else None, bool(alike)))
