#!/usr/bin/env bash
# The GPU checks and benchmarks, as one script for a lent GPU machine (no Ray there, no network).
#
#   bash bench/gpu_list.sh [OUT [PART...]]   # OUT: where the log and an archive of the results go;
#                                            # PARTs: run only these (names as below)
#
# Each part runs under its own time limit and the run goes on past a part that fails or runs
# out of time, so one call brings back whatever finished.  After every part the results so
# far are packed into OUT/gpu_results.tgz (bench/results/*_gpu.* and profile_step_cuda.*),
# so a run cut short still returns them.  Missing Python packages travel as wheels in .whl/
# (grpcio, protobuf and outlines-core, for the versions the generated stubs and the
# structured-output test need); they are installed into /tmp/site first.  Fetch them here with
# `pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64
# -d .whl grpcio==1.85.3 protobuf==7.36.2 outlines_core==0.2.14` and carry `.whl`.
#
# On one H100 (2026-11-27, fourth run, three calls on one warm machine) test_cuda, replan,
# service_overhead (its idle and floor parts included), profile_step and cost_model took 170, 72,
# 92, 52 and 66 s, 464 s with the wheels' install; e2e and batching 51 and 61 s; batched_forward
# and load_aware 36 and 108 s.  service_overhead's idle part times the in-process target right
# after an idle wait: 1.06x its scoring time after 10 ms idle (the third run's target worker
# took 10.2 ms a forward against 7.2 in-process, not explained yet).

set -u
OUT=${1:-${OUT:-/tmp/gpu_out}}
PARTS=" ${*:2} "
DEVICE=${DEVICE:-cuda}  # DEVICE=cpu: a dry run of the same list on a machine without a GPU
mkdir -p "$OUT"
LOG="$OUT/gpu_list.log"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"

pack() {
    tar czf "$OUT/gpu_results.tgz" $(ls bench/results/*_gpu.* bench/results/profile_step_cuda.* 2>/dev/null)
}

part() {  # part NAME SECONDS COMMAND...: runs COMMAND under a limit, logs its end and duration
    local name=$1 limit=$2
    shift 2
    [[ "$PARTS" == "  " || "$PARTS" == *" $name "* ]] || return 0
    local start=$SECONDS
    echo "=== $name (limit ${limit}s): $*" | tee -a "$LOG"
    timeout --kill-after=10 "$limit" "$@" >>"$LOG" 2>&1
    local rc=$?
    echo "=== $name: rc=$rc in $((SECONDS - start))s" | tee -a "$LOG"
    pack
}

{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c "import torch, transformers, grpc, google.protobuf as pb; print('torch', torch.__version__, 'transformers', transformers.__version__, 'grpcio', grpc.__version__, 'protobuf', pb.__version__, 'cuda', torch.cuda.is_available())"
} 2>&1 | tee -a "$LOG"

# The parts run in this order, the ones a short lease needs most first.
part test_cuda 200 python3 -m pytest tests/test_cuda.py -q -p no:cacheprovider --timeout 180
# Re-planning checks every 32 steps against their back-off (2026-11-27), in the step or beside it
# (2026-11-28): the checks run on the host, which bounds the GPU's steps; then a check's cost to a step
# whose time is in kernels, by tree size.
part replan 150 python3 bench/replan_bench.py --device "$DEVICE" --prompts 8 --tokens 128 --rounds 2 \
    --out replan_bench_gpu
# The fourth run left open whether a check beside the steps, whose thread takes the GIL from
# host-bound GPU steps, beats one in the step (1.059x against 1.156x, one run): the two back-off
# arms alone, on more prompts and rounds.
part replan_where 150 python3 bench/replan_bench.py --device "$DEVICE" --prompts 12 --tokens 128 --rounds 3 \
    --arms "back-off, in the step" "back-off, beside it" --stall-budgets --out replan_where_bench_gpu
part service_overhead 150 python3 bench/service_bench.py --device "$DEVICE" --parts overhead idle floor --skip-locust \
    --prompts 4 --tokens 64 --out bench/results/service_bench_gpu
part profile_step 60 python3 bench/profile_step.py --device "$DEVICE" --prompts 2 --tokens 64
# Six verifiers of the nine since per-verifier pricing (2026-11-27): each row is a few decodes.
part cost_model 120 python3 bench/cost_model_bench.py --device "$DEVICE" --prompts 3 --tokens 32 \
    --verifiers greedy rrsw spechub is gumbel minhash --trees chain:0 kary:2x3 sequoia:32 sequoia:128 \
    --out cost_model_bench_gpu
# Hedged drafts (2026-11-28): what a thread hand-off per draft costs a GPU step, and what leaving a
# late draft behind saves there.
part hedge 120 python3 bench/hedge_bench.py --device "$DEVICE" --prompts 6 --tokens 64 --name hedge_bench_gpu
part batched_forward 60 python3 bench/batched_forward_bench.py --out batched_forward_bench_gpu
part e2e 90 python3 bench/e2e_bench.py --prompts 4 --tokens 64 --temperatures 0 0.6 --skip-grid \
    --out bench/results/e2e_bench_gpu
part batching 130 python3 bench/batching_bench.py --trees sequoia:auto --users 1 4 16 --rounds 1 --tokens 64 \
    --out batching_bench_gpu
part load_aware 150 python3 bench/load_aware_bench.py --users 1 4 16 --rounds 2 --tokens 64 \
    --out load_aware_bench_gpu
echo "=== done in ${SECONDS}s" | tee -a "$LOG"
