# Shared by scripts/gpu/probe.sh and scripts/gpu/study_runs.sh (sourced, not run): the Python
# environment, the GPU's samplers and MPS, one training run per process, the results archive.
#
# Settings (environment variables), with their defaults:
#   PY=python3            the image's python3 holds torch (KINDS.md); here: PY=.venv/bin/python
#   RESULTS=/tmp/minimt_gpu   outside the repository: a warm machine keeps it between calls
#   OUT                   the device tool's folder for files that come back (dry runs: any dir)
#   EXPERIMENT=study      every run's experiment= (dry runs: smoke)
#   EXTRA=""              more overrides for every run (dry runs: trainer.max_steps=20)
#   BUDGET=570            seconds this call may take before it packs and returns (limit: 600)

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=${PY:-python3}
RESULTS=${RESULTS:-/tmp/minimt_gpu}
OUT=${OUT:?OUT must name the folder whose files come back}
EXPERIMENT=${EXPERIMENT:-study}
EXTRA=${EXTRA:-}
BUDGET=${BUDGET:-570}
CALL_START=$(date +%s)
GPU_SAMPLER=

mkdir -p "$RESULTS" "$OUT"
cd "$REPO"

log() {
    echo "[$(date +%H:%M:%S)] $*" | tee -a "$RESULTS/driver.log"
}

fail() {
    log "FAILED: $*"
    exit 1
}

seconds_left() {
    echo $((CALL_START + BUDGET - $(date +%s)))
}

# The project runs from src/ (PYTHONPATH), not pip-installed: the machine cannot fetch a build
# backend, and nothing needs an installed copy. Its dependencies missing from the image travel as
# wheels in .gpu/wheels (scripts/gpu/prepare.sh) and go to /tmp/site (where they do not import
# already: a dry run in .venv needs none); the Multi30k raw files in .gpu/multi30k. Fails fast,
# naming each package that does not import.
setup_python() {
    if ! "$PY" -c "import hydra, datasets" 2>/dev/null && compgen -G "$REPO/.gpu/wheels/*.whl" >/dev/null; then
        if [ ! -f /tmp/site/.installed ]; then
            "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
                --target /tmp/site "$REPO"/.gpu/wheels/*.whl >>"$RESULTS/driver.log" 2>&1 ||
                fail "pip could not install .gpu/wheels (see driver.log)"
            touch /tmp/site/.installed
        fi
        export PYTHONPATH=/tmp/site
    fi
    export PYTHONPATH="$REPO/src:$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
    if [ -d "$REPO/.gpu/multi30k" ]; then
        export MINIMT_DATA_URL="$REPO/.gpu/multi30k"
    fi
    "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())' \
        2>&1 | tee -a "$RESULTS/driver.log"
    "$PY" - <<'PYTHON' 2>&1 | tee -a "$RESULTS/driver.log"
import importlib, sys
need = "torch hydra omegaconf datasets pyarrow tokenizers sacrebleu tensorboard numpy scipy matplotlib tqdm"
missing = []
for name in need.split():
    try:
        importlib.import_module(name)
    except Exception as error:  # noqa: BLE001 -- any failure to import is reported
        missing.append(f"{name} ({error})")
try:
    import minimt.train.loop  # noqa: F401
except Exception as error:  # noqa: BLE001
    missing.append(f"minimt ({error})")
if missing:
    sys.exit("missing: " + "; ".join(missing) + " -- add wheels to .gpu (scripts/gpu/prepare.sh)")
print("python environment: ok")
PYTHON
    [ "${PIPESTATUS[0]}" -eq 0 ] || fail "the Python environment is incomplete"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi -L 2>&1 | tee -a "$RESULTS/driver.log"
    else
        log "nvidia-smi: absent"
    fi
}

# start_gpu_sampler NAME: utilisation and memory every 5 s into $RESULTS/NAME.nvidia-smi.csv
# ("absent" where there is no nvidia-smi).
start_gpu_sampler() {
    local file="$RESULTS/$1.nvidia-smi.csv"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader \
            -l 5 >>"$file" 2>&1 &
        GPU_SAMPLER=$!
    else
        echo absent >"$file"
    fi
}

stop_gpu_sampler() {
    if [ -n "$GPU_SAMPLER" ]; then
        kill "$GPU_SAMPLER" 2>/dev/null || true
        GPU_SAMPLER=
    fi
}

# mps on|off: start or stop the CUDA MPS daemon (kernels of several processes share the GPU at
# once). Prints what happened: on, off, or absent where the machine has no MPS control.
mps() {
    if ! command -v nvidia-cuda-mps-control >/dev/null; then
        echo absent
    elif [ "$1" = on ]; then
        # a second start only says that one runs; the daemon's output must not hold $(...) open
        nvidia-cuda-mps-control -d </dev/null >/dev/null 2>&1 || true
        echo on
    else
        echo quit | nvidia-cuda-mps-control >/dev/null 2>&1 || true
        echo off
    fi
}

# train_run DIR OVERRIDES...: one scripts/train.py process (in the foreground) in run directory
# DIR: a finished run there is skipped, an interrupted one resumed (scripts/train.py).
train_run() {
    local dir=$1
    shift
    mkdir -p "$dir"
    # shellcheck disable=SC2086  # EXTRA is a list of overrides
    "$PY" scripts/train.py "hydra.run.dir=$dir" "experiment=$EXPERIMENT" trainer.num_threads=1 \
        views=false "$@" $EXTRA >"$dir/stdout.log" 2>&1
}

# run_agenda JOBS ROOT [STOP_AT] < lines "sweep arm seed [overrides]": each line one run in
# ROOT/<sweep>/<arm>/seed<k>, JOBS at once; no run starts after the epoch second STOP_AT, nor once
# the file ROOT/drain exists; returns when the runs it started have ended.
run_agenda() {
    local jobs=$1 root=$2 stop_at=${3:-} sweep arm seed rest running=()
    while read -r sweep arm seed rest; do
        [ -n "$sweep" ] || continue
        while true; do
            local alive=()
            for pid in "${running[@]}"; do
                kill -0 "$pid" 2>/dev/null && alive+=("$pid")
            done
            running=("${alive[@]}")
            [ "${#running[@]}" -lt "$jobs" ] && break
            sleep 2
        done
        if [ -e "$root/drain" ] || { [ -n "$stop_at" ] && [ "$(date +%s)" -ge "$stop_at" ]; }; then
            log "not starting $sweep/$arm/seed$seed and the rest: $([ -e "$root/drain" ] && echo drain || echo time)"
            break
        fi
        log "start $sweep/$arm/seed$seed $rest"
        # shellcheck disable=SC2086  # rest: the line's own overrides
        train_run "$root/$sweep/$arm/seed$seed" "arm=$arm" "trainer.seed=$seed" $rest &
        running+=("$!")
    done
    wait
}

# pack NAME DIRS...: the files at the top of $RESULTS (driver.log, summary.json, nvidia-smi
# samples, ...) and the runs' results below DIRS (metrics.json, the resolved config, test
# hypotheses, logs; no checkpoints, tokenizers or TensorBoard events) in one archive,
# $OUT/NAME.tar.gz; summary.json and driver.log beside it.
pack() {
    local name=$1
    shift
    "$PY" scripts/gpu/summarize.py "$RESULTS" "$@" >"$RESULTS/summary.txt" 2>>"$RESULTS/driver.log" ||
        log "summarize.py failed (see driver.log)"
    cat "$RESULTS/summary.txt"
    (
        cd "$RESULTS" || exit 1
        {
            find . -maxdepth 1 -type f
            find "$@" -name checkpoints -prune -o -type f \( -name metrics.json \
                -o -name config.yaml -o -name overrides.yaml -o -name 'hyps.*.txt' \
                -o -name '*.log' \) -print
        } | tar -czf "$OUT/$name.tar.gz" -T -
    )
    cp "$RESULTS/summary.json" "$RESULTS/driver.log" "$OUT/" 2>/dev/null || true
    log "packed $OUT/$name.tar.gz ($(du -h "$OUT/$name.tar.gz" | cut -f1))"
}
