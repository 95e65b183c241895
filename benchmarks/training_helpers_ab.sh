#!/usr/bin/env bash
# The training check alone, for one example's candidate: how long it takes with the code in
# BASE (default build/base/src), with this checkout's, and with this checkout's held to two
# cores (KERNELAUDIT_THREADS=2: no room for helper processes, the reference's runs trained in
# the auditor). DEVICE=cpu audits on the CPU. Records under $OUT/training-helpers/.
#   VERSIONS="base now now-auditor" DEVICE=cpu bash benchmarks/training_helpers_ab.sh \
#     [EXAMPLE CANDIDATE PROFILE]
set -uo pipefail
cd "$(dirname "$0")/.."
example="${1:-cross_entropy_backward}"
candidate="${2:-fp32_softmax}"
profile="${3:-default}"
out="${OUT:-gpu-results}/training-helpers"
mkdir -p "$out"
base="${BASE:-build/base/src}"
status=0
for version in ${VERSIONS:-base now}; do
  src="$PWD/src"; [ "$version" = base ] && src="$PWD/$base"
  threads=(); [ "$version" = now-auditor ] && threads=(env KERNELAUDIT_THREADS=2)
  name="$out/$example-$candidate-$profile-${DEVICE:-default-device}-$version"
  start=$(date +%s.%N)
  PYTHONPATH="$src" "${threads[@]}" python3 -m kernelaudit.cli check "examples/$example/problem.py" \
    "examples/$example/candidates.py::$candidate" --profile "$profile" --checks training \
    ${DEVICE:+--device "$DEVICE"} --json "$name.json" > "$name.txt" 2>&1
  code=$?
  end=$(date +%s.%N)
  echo "$version $example::$candidate $profile exit $code wall $(python3 -c "print(round($end - $start, 1))") s" | tee -a "$out/summary.txt"
  python3 - "$name.json" <<'PY' | tee -a "$out/summary.txt"
import json, sys
for report in json.load(open(sys.argv[1])).get("reports", []):
    for finding in report.get("findings", []):
        evidence = finding.get("evidence") or {}
        print("  ", finding.get("key"), evidence.get("seconds"), evidence.get("seconds by side"), evidence.get("reference's runs trained by"))
PY
  [ "$code" -le 1 ] || status=1
done
exit $status
