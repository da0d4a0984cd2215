#!/usr/bin/env bash
# The field table's cells on one GPU (issue 37): several audits side by side, each into its own folder, under a
# deadline; then one archive of every folder (run records, reports, logs; checkpoints left out).
#
#   bash benchmarks/field_on_gpu.sh DATA OUTDIR DEADLINE_S ARCHIVE  'NAME|FLAGS' ['NAME|FLAGS' ...]
#
# e.g.  bash benchmarks/field_on_gpu.sh cifar10-jpeg.zip /tmp/field 480 field.tgz \
#         'field_adamw_e100_gpu_a|--optimizer adamw --methods bp usf frsf kp --jobs 4'
#
# Every audit is the protocol's (CIFAR-10, reference ResMLP d=256 L=4, 100 epochs, seed 42) on --device cuda.
# An audit writes its report only when all of its runs are stored, so give each folder what can finish by the
# deadline: at the deadline each audit is interrupted (SIGINT: finished runs kept, runs in flight discarded) and
# a folder without report.json is a partial store (rerun the same audit on a GPU to finish it).
set -u
data=$1 out=$2 deadline=$3 archive=$4
shift 4
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg OMP_NUM_THREADS=1  # one CPU thread per process: the GPU does the work
mkdir -p "$out"
t0=$(date +%s)
# decode the data once (into the cache), so the audits' processes read the cache instead of 60k JPEGs each
python3 -c "import sys; from depthaudit.data import load_data; load_data('cifar10', sys.argv[1], False, 'cpu')" \
    "$data" || exit 1
echo "[$(( $(date +%s) - t0 ))s] data cached"
pids=()
names=()
for spec in "$@"; do
    name=${spec%%|*} flags=${spec#*|}
    # shellcheck disable=SC2086  # the flags are words on purpose
    timeout -s INT "$deadline" python3 -m depthaudit audit --dataset cifar10 --data-dir "$data" --epochs 100 \
        --seeds 42 --device cuda $flags --out "$out/$name" >"$out/$name.log" 2>&1 &
    pids+=($!)
    names+=("$name")
done
while :; do
    sleep 30
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
    echo "[$(( $(date +%s) - t0 ))s] $alive of ${#pids[@]} audits running; runs stored:" \
        "$(find "$out" -name result.json | wc -l)"
    [ "$alive" -eq 0 ] && break
done
for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    rc=$?
    echo "${names[$i]}: exit $rc, report.json $([ -f "$out/${names[$i]}/report.json" ] && echo yes || echo no)," \
        "$(find "$out/${names[$i]}" -name result.json 2>/dev/null | wc -l) runs stored"
    tail -n 3 "$out/${names[$i]}.log"
done
tar -czf "$archive" -C "$out" --exclude=checkpoint.pt --exclude='*.inflight*' .
ls -la "$archive"
