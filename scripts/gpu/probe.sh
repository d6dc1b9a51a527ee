#!/usr/bin/env bash
# The lease's first call (issue 22, part 2.1): the GPU tests, then study runs side by side in
# several ways, to pick the fastest way to run the grid from the summed updates/s.
#   run(command="bash scripts/gpu/probe.sh", carry=[".gpu"], timeout_s=600, kind="nvidia-h100-x1")
#
# Each case is JOBS:MPS:GRAPHS:MINUTES: JOBS runs of arm=full_sinusoidal (seeds 1..JOBS) at once,
# the CUDA MPS daemon on or off, fixed-shape batches replayed as CUDA graphs on or off
# (trainer.compile=true trainer.shape_buckets=$BUCKETS), each run capped at MINUTES of training
# and scored on no test set. Cases run one after the other, in the order given, while the call's
# BUDGET allows (a case needs MINUTES plus CASE_MARGIN seconds); those left over are named in
# driver.log for the next call. Writes $OUT/probe.tar.gz (logs, metrics.json, nvidia-smi
# samples, summary.json), summary.json and driver.log; the table at the end gives each case's
# summed updates/s. Settings (environment; lib.sh lists the common ones):
#   CASES="16:on:off:1 16:on:on:3.5 16:off:off:1 1:off:off:1" (graphs: compilation takes its first minutes)
#   BUCKETS=[12,16,20,24,32,48,101]   CASE_MARGIN=45   PYTEST=1 (0: no pytest -m gpu)
source "$(dirname "$0")/lib.sh"
CASES=${CASES:-16:on:off:1 16:on:on:3.5 16:off:off:1 1:off:off:1}
BUCKETS=${BUCKETS:-[12,16,20,24,32,48,101]}
CASE_MARGIN=${CASE_MARGIN:-45}
PYTEST=${PYTEST:-1}

log "probe: cases $CASES, budget ${BUDGET}s"
setup_python
if [ "$PYTEST" = 1 ]; then
    log "pytest -m gpu"
    timeout 150 "$PY" -m pytest -q -m gpu -p no:cacheprovider tests >"$RESULTS/pytest-gpu.log" 2>&1
    log "pytest -m gpu: exit $? ($(tail -1 "$RESULTS/pytest-gpu.log"))"
fi

for case in $CASES; do
    IFS=: read -r jobs use_mps graphs minutes <<<"$case"
    need=$(awk -v m="$minutes" -v s="$CASE_MARGIN" 'BEGIN { printf "%d", m * 60 + s }')
    if [ "$(seconds_left)" -lt "$need" ]; then
        log "not run, too little time left: $case"
        continue
    fi
    name="jobs${jobs}_mps-${use_mps}_graphs-${graphs}"
    overrides="trainer.max_minutes=$minutes data.test_sets=[]"
    if [ "$graphs" = on ]; then
        overrides="$overrides trainer.compile=true trainer.shape_buckets=$BUCKETS"
    fi
    log "case $name: MPS $(mps "$use_mps"), $overrides"
    start_gpu_sampler "$name"
    for seed in $(seq 1 "$jobs"); do
        echo "probe/$name full_sinusoidal $seed $overrides"
    done | run_agenda "$jobs" "$RESULTS"
    stop_gpu_sampler
    mps off >/dev/null
    log "case $name: done"
done
pack probe probe
