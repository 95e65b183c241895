#!/usr/bin/env bash
# Audits the SOL-ExecBench problems, each with its own reference as the candidate, on every local
# GPU within one 10-minute command: no audit starts after STOP_AFTER seconds (default 330), none
# runs past TIMEOUT (default 180), and the whole run is ended at LIMIT (default 560) whatever
# happens. Two files land in $OUT (default ./scale-results): solexecbench-scale.json (every
# problem's record and the summary) and solexecbench-scale-logs.tar.gz (each audit's stdout,
# stderr and JSON report, and this run's output).
#   PROBLEMS=path/to/solexecbench bash benchmarks/solexecbench_scale_gpu.sh [options...]
# Options go to benchmarks/solexecbench_scale.py (--profile, --only, --skip-done EARLIER.json).
# SRC=path/to/src audits with the kernelaudit package there (an older commit's, say).
# PROBLEMS defaults to shared/solexecbench in the checkout, else ../shared/solexecbench.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-scale-results}"
work="$(mktemp -d /tmp/solexecbench-scale.XXXXXX)"
problems="${PROBLEMS:-}"
if [ -z "$problems" ]; then
  problems=shared/solexecbench
  [ -d "$problems" ] || problems=../shared/solexecbench
fi
mkdir -p "$out"
# SRC: the kernelaudit package to audit with (default this checkout's src), first on the path
export PYTHONPATH="${SRC:-$PWD/src}${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# Where bytecode is not written (or site-packages is read-only), every process would compile
# torch from source (seconds per process, which no installed environment pays): bytecode goes
# to a writable folder instead, written once before the audits start.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-/tmp/kernelaudit-pycache}"
python3 -c 'import torch, torch._dynamo, torch.profiler, triton, kernelaudit.engine.audit, kernelaudit.runner.worker.main, kernelaudit.sanitizer.child'
{
  nvidia-smi --query-gpu=index,name,memory.total --format=csv
  timeout -s TERM -k 20 "${LIMIT:-560}" python3 benchmarks/solexecbench_scale.py "$problems" \
    --out "$out/solexecbench-scale.json" --work "$work" --timeout "${TIMEOUT:-180}" \
    --stop-after "${STOP_AFTER:-330}" "$@"
  echo "exit code $?"
} 2>&1 | tee "$work/run.txt"
tar -czf "$out/solexecbench-scale-logs.tar.gz" --exclude='*.html' -C "$work" run.txt logs reports
ls -l "$out"
