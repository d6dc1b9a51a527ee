#!/usr/bin/env bash
# The study's missing runs on a lent GPU (issue 22, part 2.2), over as many 10-minute calls as
# they take; each call returns within BUDGET seconds with every run finished so far packed.
#   run(command="JOBS=16 MPS=on bash scripts/gpu/study_runs.sh", carry=[".gpu"], timeout_s=600)
#   then here: python scripts/gpu/unpack.py archive=<files_at>/study_runs.tar.gz
#
# The first call works out the agenda's runs still to make (scripts/gpu/agenda.py: the agenda
# less the runs collected in docs/study/runs, which travel with the working tree) and starts a
# scheduler in its own process session, so that it outlives the call: it trains them in order,
# JOBS at once, each run its own scripts/train.py process in $RESULTS/runs/<sweep>/<arm>/seed<k>
# (experiment=$EXPERIMENT unchanged, bf16 on the GPU, one CPU thread, views off, no time cap but
# experiment=study's own). A call that finds the scheduler running (the machine stayed warm:
# the next call came within its 30 s) leaves it alone. Either way the call waits until its
# BUDGET is spent or the scheduler has ended, then packs. If the machine went back, the next
# call starts afresh from the agenda less what has been unpacked here since.
# DRAIN=1: the scheduler starts no more runs; the call waits for those running (the lease's
# last call). Settings (environment; lib.sh lists the common ones):
#   AGENDA=scripts/gpu/study_agenda.txt  COLLECTED=docs/study/runs  JOBS=16  MPS=on|off (off)
#   GRAPHS=on|off (off: with on, trainer.compile=true trainer.shape_buckets=$BUCKETS)
#   BUCKETS=[12,16,20,24,32,48,101]  DRAIN=0
source "$(dirname "$0")/lib.sh"
AGENDA=${AGENDA:-scripts/gpu/study_agenda.txt}
COLLECTED=${COLLECTED:-docs/study/runs}
JOBS=${JOBS:-16}
MPS=${MPS:-off}
GRAPHS=${GRAPHS:-off}
BUCKETS=${BUCKETS:-[12,16,20,24,32,48,101]}
DRAIN=${DRAIN:-0}
PIDFILE="$RESULTS/scheduler.pid"

setup_python
if [ "$DRAIN" = 1 ]; then
    mkdir -p "$RESULTS/runs"
    touch "$RESULTS/runs/drain"
    log "drain: no new runs start"
fi
if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    log "the scheduler started by an earlier call is still running (pid $(cat "$PIDFILE"))"
else
    mkdir -p "$RESULTS/runs"
    "$PY" scripts/gpu/agenda.py "agenda=$AGENDA" "results=$RESULTS/runs" \
        "collected=$COLLECTED" "experiment=$EXPERIMENT" >"$RESULTS/pending.txt" 2>>"$RESULTS/driver.log" ||
        fail "scripts/gpu/agenda.py failed (see driver.log)"
    extra=""
    if [ "$GRAPHS" = on ]; then
        extra="trainer.compile=true trainer.shape_buckets=$BUCKETS"
    fi
    log "$(wc -l <"$RESULTS/pending.txt") runs to make, $JOBS at once, MPS $(mps "$MPS"), graphs $GRAPHS"
    # functions are parsed whole before they run: a working tree re-sent by a later call does not
    # change a running scheduler
    EXTRA="$EXTRA $extra" RESULTS="$RESULTS" PY="$PY" EXPERIMENT="$EXPERIMENT" setsid bash -c "
        source scripts/gpu/lib.sh
        run_agenda '$JOBS' '$RESULTS/runs' <'$RESULTS/pending.txt'
        log 'scheduler: agenda done'" </dev/null >>"$RESULTS/scheduler.log" 2>&1 &
    echo $! >"$PIDFILE"
fi

start_gpu_sampler "study_runs"
while kill -0 "$(cat "$PIDFILE")" 2>/dev/null && [ "$(seconds_left)" -gt 15 ]; do
    sleep 5
done
stop_gpu_sampler
if kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    log "budget spent: packing, the scheduler runs on"
fi
pack study_runs runs
