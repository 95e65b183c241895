#!/usr/bin/env bash
# Chosen SOL-ExecBench references audited as their own candidates by an older tree's code
# ($BASE/src, default build/base) and by this one, each cut at LIMIT seconds, the sides taking
# turns going first: each audit's progress log and JSON report side by side in $OUT (an audit
# cut short still shows how far it got, which the scale benchmark's record does not). Each is
# run as `python -m kernelaudit check`, as the `kernelaudit` command starts it: its first
# worker starting before the auditor imports torch (`runner.auditor.prestart`); a tree too old to
# have that entry as `python -m kernelaudit.cli check`.
# AB_SIDES="new" audits by this tree alone (a baseline, say).
#   OUT=... AB_PROBLEMS="L1/026_ L2/028_" LIMIT=120 bash benchmarks/ab_logs.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-results}"
mkdir -p "$out" /tmp/ab-shims
sides=(${AB_SIDES:-base new})
for problem in ${AB_PROBLEMS:-L1/026_ L2/028_}; do
  folder=$(realpath "$(ls -d "${PROBLEMS:-build/solexecbench}"/${problem}* | head -n 1)")
  shim=$(cd benchmarks && PYTHONPATH="$PWD/../src" python3 -c 'import sys; from pathlib import Path; from solexecbench_scale import write_shim; print(write_shim(Path(sys.argv[1]), Path("/tmp/ab-shims")))' "$folder")
  name=$(echo "$problem" | tr '/' '-' | tr -d '_')
  for side in "${sides[@]}"; do
    src="$PWD/src"; [ "$side" = base ] && src="$PWD/${BASE:-build/base}/src"
    # a tree older than the command's early worker has no `python -m kernelaudit`
    entry=kernelaudit; [ -f "$src/kernelaudit/__main__.py" ] || entry=kernelaudit.cli
    began=$(date +%s.%N)
    PYTHONPATH="$src" timeout -s INT "${LIMIT:-120}" python3 -m "$entry" check "$folder" "$shim" \
      --profile "${AB_PROFILE:-default}" --json "$out/$name-$side.json" > "$out/$name-$side.log" 2>&1
    echo "$name $side exit $? in $(python3 -c "import sys, time; print(round(time.time() - float(sys.argv[1]), 1))" "$began") s" | tee -a "$out/ab-logs.txt"
  done
  [ ${#sides[@]} -eq 2 ] && sides=("${sides[1]}" "${sides[0]}")
done
