#!/usr/bin/env bash
# What a GPU machine runs for this project, in one go: the GPU tests (the hostile corpus's GPU
# cases among them), the timing cross-check against the profiler, the audit benchmark of every
# example (quick and default profiles, verdicts checked against expected.json), the training
# check's experiment on every example wired to a slot, the GPU tests of the memory-safety,
# race and invariance checks (safety), and the thorough demo (no false positives). Results land in $OUT (default ./gpu-results).
#   bash benchmarks/gpu_run.sh [tests|some-tests|child-exit|command-end|host-memory|casts|clock|clock-busy|guard|lent|scans|ab|examples-ab|unaudited|sweep|planning|rerun|held-memory|training-ab|worker-channel|engine|sol-sample|sol-samples|stratified|early-ab|selections|references|demo-quick|safety|profile|sampled|sandbox|timing|bench|training|channel|thorough ...]
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-results}"
mkdir -p "$out"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# Where bytecode is not written (or site-packages is read-only), every process would compile
# torch from source (seconds per process, which no installed environment pays): bytecode goes
# to a writable folder instead.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-/tmp/pycache}"
# A machine without network and without a dependency the package declares (jsonschema, say)
# installs it from wheels carried to build/wheels (`pip download -d build/wheels jsonschema
# --only-binary=:all: --python-version 3.12 ...`), into a folder of its own.
missing=()
for module in jsonschema matplotlib; do python3 -c "import $module" 2>/dev/null || missing+=("$module"); done
if [ ${#missing[@]} -gt 0 ] && [ -d build/wheels ]; then
  python3 -m pip install -q --no-index --find-links build/wheels --target /tmp/kernelaudit-extra \
    "${missing[@]}" 2>&1 | tail -n 2
  export PYTHONPATH="$PYTHONPATH:/tmp/kernelaudit-extra"
fi
steps=("${@:-tests bench thorough}")
failed=0
# a failing test makes the whole run exit non-zero, whatever step it was in
note() { [ "$1" -eq 0 ] || failed=1; echo "pytest exit code $1" | tee -a "$2"; }
for step in ${steps[@]}; do
  case "$step" in
    tests)
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
      python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' | tee -a "$out/gpu.txt"
      python3 -m pytest -q -p no:cacheprovider -m "gpu" tests > "$out/gpu-tests.txt" 2>&1
      note $? "$out/gpu-tests.txt"
      python3 -m pytest -q -p no:cacheprovider tests/examples tests/engine/test_examples_end_to_end.py -k "not demo_passes" >> "$out/gpu-tests.txt" 2>&1
      note $? "$out/gpu-tests.txt"
      tail -n 25 "$out/gpu-tests.txt"
      ;;
    some-tests)
      # chosen tests on the GPU, every one whether marked gpu or not (TESTS="tests/a.py ...",
      # TESTS_K for pytest's -k), for a change whose GPU paths they are
      python3 -m pytest -q -p no:cacheprovider ${TESTS} -k "${TESTS_K:-not demo_passes}" \
        > "$out/some-tests.txt" 2>&1
      note $? "$out/some-tests.txt"
      tail -n 5 "$out/some-tests.txt"
      ;;
    child-exit)
      # how long a child that ran a candidate on the GPU takes to end once it has answered, as
      # Python ends and at once (`runner.boundary.ending`)
      python3 benchmarks/child_exit.py --device cuda --rounds "${CHILD_EXIT_ROUNDS:-5}" \
        --json "$out/child-exit-gpu.json" 2>&1 | tail -n 3
      ;;
    clock)
      # the auditor's clock (engine/clocked.py): its tests on the GPU, then every example and
      # the smallest SOL-ExecBench references (as many as start within CLOCK_STOP_AFTER s)
      # audited with the timing check alone, the two clocks compared
      python3 -m pytest -q -p no:cacheprovider tests/engine/test_clocked.py \
        tests/runner/auditor/test_observed.py tests/redteam/test_forged_observations.py tests/timing \
        > "$out/clock-tests.txt" 2>&1
      note $? "$out/clock-tests.txt"
      tail -n 5 "$out/clock-tests.txt"
      mkdir -p "$out/clock-examples"
      for example in examples/*/; do
        name="$(basename "$example")"
        mapfile -t listed < <(python3 -c 'import json, sys; [print(sys.argv[1] + c["candidate"]) for c in json.load(open(sys.argv[1] + "expected.json"))["candidates"]]' "$example")
        python3 -m kernelaudit check "$example/problem.py" "${listed[@]}" \
          --checks timing --profile quick --device cuda --json "$out/clock-examples/$name.json" \
          > "$out/clock-examples/$name.txt" 2>&1
      done
      STOP_AFTER="${CLOCK_STOP_AFTER:-150}" TIMEOUT=60 LIMIT="${CLOCK_LIMIT:-240}" \
        OUT="$out/clock-sol" PROBLEMS="${PROBLEMS:-build/solexecbench}" \
        bash benchmarks/solexecbench_scale_gpu.sh --profile quick --device cuda --checks timing \
        2>&1 | tail -n 2
      mkdir -p /tmp/clock-sol && tar -xzf "$out/clock-sol/solexecbench-scale-logs.tar.gz" -C /tmp/clock-sol
      python3 benchmarks/clock_agreement.py "$out/clock-examples" /tmp/clock-sol/reports \
        --out "$out/clock-agreement.json" | tail -n 60
      ;;
    engine)
      # judging on the device, the budgeted plan and every check's GPU path
      python3 -m pytest -q -p no:cacheprovider -m gpu tests/oracle tests/engine tests/checks \
        > "$out/engine-tests.txt" 2>&1
      note $? "$out/engine-tests.txt"
      tail -n 15 "$out/engine-tests.txt"
      ;;
    sol-sample)
      # three SOL-ExecBench problems, each audited with its own reference, default profile
      python3 benchmarks/solexecbench_scale.py "${PROBLEMS:-build/solexecbench}" \
        --out "$out/sol-sample.json" --profile default --timeout 240 --device cuda \
        --only 022_rmsnorm_h512 034_flux_multi_axis 071_kv_cache_update 2>&1 | tail -n 30
      ;;
    scans)
      # what the waits on a candidate's processes cost the auditor's main thread on this host
      # (benchmarks/process_scans.py), with the host's own processes and 300 more, by this
      # tree and, where there is one, by the older one in $BASE (default build/base)
      mkdir -p "$out/scans"
      ls /proc | grep -c '^[0-9]' > "$out/scans/host-processes.txt"
      for side in base new; do
        src="$PWD/src"; [ "$side" = base ] && src="$PWD/${BASE:-build/base}/src"
        [ -d "$src" ] || continue
        for extra in 0 300; do
          PYTHONPATH="$src" timeout 120 python3 benchmarks/process_scans.py --processes "$extra" \
            --json "$out/scans/$side-$extra.json"
        done
      done
      ;;
    ab)
      # the same SOL-ExecBench problems audited by an older tree's code ($BASE/src, say
      # `git archive OLD src benchmarks | tar -x -C build/base`) and by this one, alternating
      # which goes first, AB_PROFILE (default: default): what a change to the auditor saves
      problems=(${AB_PROBLEMS:-L1/072_cross L2/057_residual})
      sides=(new base)
      # bytecode for both trees, so neither's first audit pays for compiling it
      for src in "$PWD/src" "$PWD/${BASE:-build/base}/src"; do
        # the worker's module by either tree's name (runner/worker.py before the runner's folders)
        PYTHONPATH="$src" python3 -c 'import importlib, torch, torch._dynamo, torch.profiler, triton, kernelaudit.engine.audit, kernelaudit.sanitizer.child
try:
    importlib.import_module("kernelaudit.runner.worker.main")
except ImportError:
    importlib.import_module("kernelaudit.runner.worker")'
      done
      for problem in "${problems[@]}"; do
        for side in "${sides[@]}"; do
          src="$PWD/src"; [ "$side" = base ] && src="$PWD/${BASE:-build/base}/src"
          kept=(); [ -f "$out/ab/$side.json" ] && kept=(--skip-done)
          PYTHONPATH="$src" python3 benchmarks/solexecbench_scale.py "${PROBLEMS:-build/solexecbench}" \
            --out "$out/ab/$side.json" "${kept[@]}" --profile "${AB_PROFILE:-default}" --timeout 240 \
            --device cuda --only "$problem" 2>&1 | tail -n 3
        done
        sides=("${sides[1]}" "${sides[0]}")
      done
      ;;
    casts)
      # a host tensor sent to the GPU at float64: cast on the host, or sent as it is and cast
      # there (device_copies.moved), by size, dtype and kind of host memory
      python3 benchmarks/device_casts.py --out "$out/device-casts.json" 2>&1 | tail -n 20
      ;;
    clock-busy)
      # the auditor's clock on a busy host: chosen SOL-ExecBench references (CLOCK_PROBLEMS)
      # audited with the timing check alone while BUSY Python processes (default: one per
      # core) spin beside them, by an older tree's code ($BASE/src, default build/base) and
      # by this one, alternated ROUNDS times; a clock failure of a reference is a false one
      base="${BASE:-build/base}"
      problems=(${CLOCK_PROBLEMS:-L1/063_ L1/074_ L1/081_ L1/021_ L1/067_})
      spinners=()
      for _ in $(seq "${BUSY:-$(nproc)}"); do
        python3 -c 'while True: pass' & spinners+=($!)
      done
      for round in $(seq "${ROUNDS:-1}"); do
        for side in base new; do
          src="$PWD/src"; [ "$side" = base ] && src="$PWD/$base/src"
          SRC="$src" STOP_AFTER="${STOP_AFTER:-240}" TIMEOUT="${TIMEOUT:-120}" \
            LIMIT="${LIMIT:-280}" OUT="$out/clock-busy/$side-$round" \
            PROBLEMS="${PROBLEMS:-build/solexecbench}" \
            bash benchmarks/solexecbench_scale_gpu.sh --profile quick --checks timing \
            --device cuda --order listed --only "${problems[@]}" 2>&1 | tail -n 3
        done
      done
      kill "${spinners[@]}" 2>/dev/null
      ;;
    examples-ab)
      # the bundled examples (EXAMPLES: a folder of some of them; default all) audited in the
      # default profile by an older tree's code ($BASE/src) and by this one, AB_ROUNDS rounds
      # each, alternating, after one round by this tree that fills every candidate's Triton
      # cache (both trees then audit with the same warm cache)
      examples="${EXAMPLES:-examples}"
      mkdir -p "$out/examples-ab"
      python3 benchmarks/audit_examples.py --profiles default --device cuda --examples "$examples" \
        --out "$out/examples-ab/warm-up.json" > "$out/examples-ab/warm-up.txt" 2>&1
      for round in $(seq "${AB_ROUNDS:-2}"); do
        for side in base new; do
          src="$PWD/src"; [ "$side" = base ] && src="$PWD/${BASE:-build/base}/src"
          PYTHONPATH="$src:/tmp/kernelaudit-extra" python3 benchmarks/audit_examples.py \
            --profiles default --device cuda \
            --examples "$examples" --out "$out/examples-ab/$side-$round.json" \
            > "$out/examples-ab/$side-$round.txt" 2>&1
          tail -n 4 "$out/examples-ab/$side-$round.txt"
        done
      done
      ;;
    sol-samples)
      # the smallest SOL-ExecBench problems, each audited with its own reference, in the quick
      # and the default profile: as many as start within 190 s of each (resumable records)
      for profile in quick default; do
        STOP_AFTER=190 TIMEOUT=120 LIMIT=260 OUT="$out/sol-$profile" PROBLEMS="${PROBLEMS:-build/solexecbench}" \
          bash benchmarks/solexecbench_scale_gpu.sh --profile "$profile" --device cuda 2>&1 | tail -n 2
      done
      ;;
    stratified)
      # every 8th runnable problem by size (26), each its own reference as the candidate,
      # default profile, one audit per GPU: what a whole-benchmark run costs per problem
      sample=(L1/034_flux FlashInfer-Bench/001_fused FlashInfer-Bench/003_fused L1/083_attention
              L1/073_fused L2/036_convnextv2 L1/042_moe L2/057_residual L1/023_multimodal
              L2/074_sam Quant/011_fp8 L1/089_vae Quant/007_fp8 L2/045_audio L1/072_cross
              L1/064_latent L2/022_video L1/091_fused L1/001_attention FlashInfer-Bench/008_gemm
              L2/069_joint L2/032_dual L2/002_decoder L2/020_decoder L2/016_moe L2/029_moe)
      STOP_AFTER="${STOP_AFTER:-240}" TIMEOUT="${TIMEOUT:-120}" LIMIT="${LIMIT:-560}" \
        OUT="$out/stratified" PROBLEMS="${PROBLEMS:-build/solexecbench}" \
        bash benchmarks/solexecbench_scale_gpu.sh --profile default --device cuda \
        --only "${sample[@]}" 2>&1 | tail -n 4
      ;;
    unaudited)
      # the runnable problems no default run in benchmarks/results has audited yet, smallest
      # first, each its own reference as the candidate: as many as start within STOP_AFTER
      sol="${PROBLEMS:-build/solexecbench}"
      mapfile -t owed < <(python3 benchmarks/unaudited.py benchmarks/results "$sol")
      STOP_AFTER="${STOP_AFTER:-420}" TIMEOUT="${TIMEOUT:-120}" LIMIT="${LIMIT:-560}" \
        OUT="$out/unaudited" PROBLEMS="$sol" \
        bash benchmarks/solexecbench_scale_gpu.sh --profile default --device cuda \
        --only "${owed[@]}" 2>&1 | tail -n 4
      ;;
    sweep)
      # every runnable SOL-ExecBench problem in one shuffled order (seed SEED, default 0),
      # default profile, by the code CODE names (the kernelaudit package in SRC, default src):
      # whatever prefix of the order is audited is a uniform sample. SWEEP_FROM: an earlier
      # file of the same code to go on from; none started after STOP_AFTER seconds
      from=(); [ -n "${SWEEP_FROM:-}" ] && from=(--skip-done "$SWEEP_FROM")
      STOP_AFTER="${STOP_AFTER:-400}" TIMEOUT="${TIMEOUT:-120}" LIMIT="${LIMIT:-540}" \
        OUT="$out/sweep" PROBLEMS="${PROBLEMS:-build/solexecbench}" \
        bash benchmarks/solexecbench_scale_gpu.sh --profile default --device cuda \
        --order shuffled --seed "${SEED:-0}" --code "${CODE:?name the code audited}" \
        "${from[@]}" 2>&1 | tail -n 4
      ;;
    host-memory)
      # the host memory of every process of an audit, read each second until it ends or
      # MEMORY_LIMIT s pass (benchmarks/host_memory_trace.py), for SOL-ExecBench references
      # as their own candidates (MEMORY_SOL="L1/026_ ...", default profile)
      for prefix in ${MEMORY_SOL:-L1/026_}; do
        folder=$(realpath "$(ls -d "${PROBLEMS:-build/solexecbench}"/${prefix}* | head -n 1)")
        shim=$(cd benchmarks && python3 -c 'import sys; from pathlib import Path; from solexecbench_scale import write_shim; print(write_shim(Path(sys.argv[1]), Path("/tmp/shims")))' "$folder")
        name=$(echo "$prefix" | tr -d '/_')
        # MEMORY_STACKS=S: the auditor's Python stacks every S seconds, to stacks-NAME.txt
        runner=(python3 -m kernelaudit)
        if [ -n "${MEMORY_STACKS:-}" ]; then
          child=$(cd benchmarks && python3 -c 'from stacks import CHILD; print(CHILD)')
          runner=(python3 -c "$child" "$out/stacks-$name.txt" "$MEMORY_STACKS")
          # MEMORY_HELD=1 besides: the host tensors of 256 MiB or more and what holds them,
          # each time (benchmarks/host_tensors.py)
          [ -n "${MEMORY_HELD:-}" ] && runner=(python3 benchmarks/host_tensors.py "$out/stacks-$name.txt" "$MEMORY_STACKS")
        fi
        rm -f "/tmp/host-memory-$name-report.json"  # a killed audit's run leaves none
        python3 benchmarks/host_memory_trace.py --out "$out/host-memory-$name.json" \
          --limit "${MEMORY_LIMIT:-150}" -- "${runner[@]}" check "$folder" "$shim" \
          --profile "${MEMORY_PROFILE:-default}" --device cuda --json "/tmp/host-memory-$name-report.json" | tail -n 1
        # the report, where the audit wrote one, and the stacks, compressed beside the trace
        [ -f "/tmp/host-memory-$name-report.json" ] && gzip -c "/tmp/host-memory-$name-report.json" > "$out/report-$name.json.gz"
        [ -f "$out/stacks-$name.txt" ] && gzip -f "$out/stacks-$name.txt"
      done
      ;;
    planning)
      # every check's planning timed on its own, SOL references as candidates (PLANNING="L1/092_ ...")
      python3 benchmarks/planning_parts.py "${PROBLEMS:-build/solexecbench}" \
        ${PLANNING:-L1/092_ L1/015_ L1/067_ L2/059_ L2/016_ L2/047_} --device cuda \
        --out "$out/planning.json" 2>&1 | tail -n 8
      ;;
    rerun)
      # chosen SOL-ExecBench problems audited again, default profile (RERUN="L2/076_ ..."),
      # none started after STOP_AFTER seconds; the reports and logs kept in one archive (the
      # work folder emptied first: a machine may keep another run's /tmp). CODE names the
      # code in the record (the machine's copy of the tree may hold another commit's .git)
      rm -rf /tmp/rerun-work
      python3 benchmarks/solexecbench_scale.py "${PROBLEMS:-build/solexecbench}" \
        --out "$out/rerun.json" --work /tmp/rerun-work --profile default --code "${CODE:-}" \
        --timeout "${TIMEOUT:-150}" --stop-after "${STOP_AFTER:-3600}" --device cuda \
        --only ${RERUN} 2>&1 | tail -n 4
      tar -czf "$out/rerun-logs.tar.gz" -C /tmp/rerun-work logs reports
      ;;
    training-ab)
      # the training check's runs, each kind timed alone (benchmarks/training_parts.py), by an
      # older tree's code ($BASE/src) and by this one, STEPS steps
      examples="$PWD/examples"
      for side in base new; do
        src="$PWD/src"; [ "$side" = base ] && src="$PWD/${BASE:-build/base}/src"
        (cd benchmarks && PYTHONPATH="$src" timeout "${PART_LIMIT:-120}" python3 training_parts.py \
          --device cuda --steps "${STEPS:-20}" --examples "$examples" \
          --problems ${TRAINING_PROBLEMS:-embedding_backward rmsnorm_backward} \
          --out "$out/training-parts-$side.json" 2>&1 | tail -n 2)
      done
      ;;
    early-ab)
      # the 11 smallest runnable problems, quick, with each audit's worker started as the
      # command starts, then as the audit asks for it (ORDER=late-first: the other way round;
      # ORDER=early-only: the first alone)
      order="${ORDER:-early-first}"
      modes=(early late); [ "$order" = late-first ] && modes=(late early)
      [ "$order" = early-only ] && modes=(early)
      smallest=(FlashInfer-Bench/001_ FlashInfer-Bench/002_ FlashInfer-Bench/021_
                FlashInfer-Bench/022_ FlashInfer-Bench/023_ FlashInfer-Bench/024_
                FlashInfer-Bench/025_ L1/011_ L1/016_ L1/028_ L1/034_)
      for mode in "${modes[@]}"; do
        flag=(); [ "$mode" = late ] && flag=(--no-early-worker)
        STOP_AFTER="${STOP_AFTER:-200}" TIMEOUT=120 LIMIT="${AB_LIMIT:-240}" OUT="$out/ab-$mode" \
          PROBLEMS="${PROBLEMS:-build/solexecbench}" bash benchmarks/solexecbench_scale_gpu.sh \
          --profile quick --device cuda --only "${smallest[@]}" "${flag[@]}" 2>&1 | tail -n 2
      done
      ;;
    selections)
      # the mixture-of-experts gate that failed as its own candidate (its top-k indices decided
      # by rounding), and where a transposed convolution with an infinite weight gives NaN
      # (L2/036's grad_x)
      python3 benchmarks/conv_padding_nonfinite.py --device cuda \
        --out "$out/conv-padding-nonfinite.json" > "$out/conv-padding-nonfinite.txt" 2>&1
      echo "conv_padding_nonfinite exit code $?"
      rm -rf /tmp/selections-work
      python3 benchmarks/solexecbench_scale.py "${PROBLEMS:-build/solexecbench}" \
        --out "$out/quant-011.json" --work /tmp/selections-work --profile default \
        --timeout 200 --device cuda --only Quant/011_ 2>&1 | tail -n 6
      cp /tmp/selections-work/reports/*.json "$out/" 2>/dev/null
      ;;
    references)
      # the references that failed as their own candidates: audited again (default profile),
      # then each failing case replayed with torch's precision defaults on and off
      rm -rf /tmp/references-work
      python3 benchmarks/solexecbench_scale.py "${PROBLEMS:-build/solexecbench}" \
        --out "$out/references.json" --work /tmp/references-work --profile default \
        --timeout 150 --stop-after 300 --device cuda \
        --only L1/066_ L1/073_ L2/036_ L2/057_ 2>&1 | tail -n 12
      python3 benchmarks/reference_defaults.py /tmp/references-work/reports/*.json \
        --out "$out/reference-defaults.json" > "$out/reference-defaults.txt" 2>&1
      echo "reference_defaults exit code $?" | tee -a "$out/reference-defaults.txt"
      ;;
    demo-quick)
      timeout "${DEMO_LIMIT:-600}" python3 -m kernelaudit.cli demo --profile quick \
        --json "$out/demo-quick.json" > "$out/demo-quick.txt" 2>&1
      echo "demo exit code $?" | tee -a "$out/demo-quick.txt"
      ;;
    safety)
      command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer
      python3 -m pytest -q -p no:cacheprovider -rA --durations=15 -m gpu tests/sanitizer \
        tests/interpret tests/checks/test_races_check.py tests/checks/test_autotune_check.py \
        tests/checks/test_memory_check.py tests/checks/test_large_tensors_check.py \
        tests/checks/test_batch_invariance_check.py > "$out/safety.txt" 2>&1
      note $? "$out/safety.txt"
      tail -n 40 "$out/safety.txt"
      ;;
    guard)
      # kernelaudit.guard on the GPU: its tests (the training demonstration at the small
      # decoder's size among them), the example job with both kernels, and its cost a step
      python3 -m pytest -q -p no:cacheprovider -m gpu tests/guarding > "$out/guard-tests.txt" 2>&1
      note $? "$out/guard-tests.txt"
      tail -n 5 "$out/guard-tests.txt"
      for kernel in accumulate_in_low_precision wide_accumulator; do
        python3 examples/embedding_backward/guard_training.py --kernel "$kernel" --steps 20 \
          --records "$out/guard-records-$kernel" 2>/dev/null | tee "$out/guard-$kernel.txt"
      done
      python3 benchmarks/guard_overhead.py --steps "${GUARD_STEPS:-200}" \
        --out "$out/guard-overhead.json" 2>&1 | tail -n 3
      ;;
    lent)
      # device memory lent to a confined worker (`runner.boundary.lent`): whether both sides see each
      # other's writes, what lending costs, and what the auditor's own look at a GPU call's
      # memory costs against the worker's own buffers
      python3 benchmarks/lent_memory.py --out "$out/lent-memory.json" 2>&1 | tail -n 8
      python3 benchmarks/observed_memory.py --device cuda --sizes-mib 1 16 256 \
        --out "$out/observed-memory-gpu.json" 2>&1 | tail -n 5
      ;;
    held-memory)
      # what the allocator still holds after common library calls, and who allocated it
      # (HELD_SOL="L1/035_": that SOL-ExecBench problem's reference, every check, instead)
      sol=(); checks="races,memory"
      if [ -n "${HELD_SOL:-}" ]; then
        sol=(--sol "$(ls -d "${PROBLEMS:-build/solexecbench}"/${HELD_SOL}* | head -n 1)"); checks=""
      fi
      python3 benchmarks/held_memory.py --audit --checks "$checks" "${sol[@]}" \
        --out "$out/held-memory.json" 2>&1 | tail -n 40
      ;;
    command-end)
      # what a `kernelaudit check` costs outside its audit, start to exit: the parts timed in
      # the process (benchmarks/command_parts.py) and the process timed from outside, for
      # COMMAND_SOL (default "L1/062_ L1/063_"), quick, twice each
      mkdir -p "$out/command-end"
      for prefix in ${COMMAND_SOL:-L1/062_ L1/063_}; do
        folder=$(realpath "$(ls -d "${PROBLEMS:-build/solexecbench}"/${prefix}* | head -n 1)")
        shim=$(cd benchmarks && python3 -c 'import sys; from pathlib import Path; from solexecbench_scale import write_shim; print(write_shim(Path(sys.argv[1]), Path("/tmp/shims")))' "$folder")
        name=$(echo "$prefix" | tr '/' '-' | tr -d '_')
        for round in 1 2; do
          before=$(date +%s.%N)
          python3 benchmarks/command_parts.py --out "$out/command-end/$name-$round.json" -- \
            "$folder" "$shim" --profile quick > "$out/command-end/$name-$round.log" 2>&1
          echo "$before $(date +%s.%N)" > "$out/command-end/$name-$round.times"
        done
      done
      ;;
    profile)
      # where one audit's time goes: the auditor and every child under cProfile, and a timeline
      sol="${PROBLEMS:-build/solexecbench}"
      runs=("--sol $sol/L1/016_rope_inverse_frequency_computation --profile quick"
            "--sol $sol/FlashInfer-Bench/022_rmsnorm_h512 --profile quick"
            "--sol $sol/FlashInfer-Bench/022_rmsnorm_h512 --profile default"
            "examples/layernorm/problem.py examples/layernorm/candidates.py::masked_statistics --profile default")
      names=(sol016-quick sol022-quick sol022-default layernorm-default)
      if [ -n "${PROFILE_SOL:-}" ]; then
        # chosen SOL-ExecBench problems instead, in PROFILE_AS (default `default`;
        # PROFILE_SOL="L1/056_ ...")
        runs=(); names=()
        for prefix in $PROFILE_SOL; do
          folder=$(ls -d "$sol"/${prefix}* | head -n 1)
          runs+=("--sol $folder --profile ${PROFILE_AS:-default}")
          names+=("$(echo "$prefix" | tr '/A-Z' '-a-z' | tr -d '_')${PROFILE_AS:-default}")
        done
      fi
      # bytecode for what every audit imports, so no run below pays for compiling it
      python3 -c 'import torch, torch._dynamo, torch.profiler, triton, kernelaudit.engine.audit, kernelaudit.runner.worker.main, kernelaudit.sanitizer.child'
      for i in "${!runs[@]}"; do
        # PROFILE_FLAGS="--stopwatches-only": the stopwatches at full speed, no cProfile
        python3 benchmarks/profile_audit.py ${runs[$i]} ${PROFILE_FLAGS:-} --out "$out/profiles/${names[$i]}" 2>&1 | head -n 40
        cp "$out/profiles/${names[$i]}/summary.txt" "$out/profile-${names[$i]}.txt"
      done
      tar -czf "$out/profiles.tar.gz" -C "$out" profiles && rm -rf "$out/profiles"
      ;;
    sampled)
      # where one audit's time goes in every thread and child, sampled by py-spy (a copy of its
      # binary carried in build/pyspy; the sandbox off, so py-spy follows the worker), and the
      # samples summed by benchmarks/sampled_profile.py (SAMPLED="PROBLEM CANDIDATE", or
      # SAMPLED_SOL="L2/016_" for a SOL-ExecBench reference as its own candidate; RATE samples a
      # second, LIMIT seconds at most; SAMPLED_PROFILE the profile, default `default`;
      # SAMPLED_WARM=1 audits it once unsampled first)
      if [ -n "${SAMPLED_SOL:-}" ]; then
        folder=$(realpath "$(ls -d "${PROBLEMS:-build/solexecbench}"/${SAMPLED_SOL}* | head -n 1)")
        shim=$(cd benchmarks && python3 -c 'import sys; from pathlib import Path; from solexecbench_scale import write_shim; print(write_shim(Path(sys.argv[1]), Path("/tmp/shims")))' "$folder")
        SAMPLED="$folder $shim"
      fi
      if [ -n "${SAMPLED_WARM:-}" ]; then
        # the same audit once unsampled first, so the sampled one meets a warm Triton cache
        # (the sandbox off has a cache of its own): where a candidate's later audits go
        KERNELAUDIT_SANDBOX=off timeout "${LIMIT:-600}" python3 -m kernelaudit.cli check \
          ${SAMPLED:-examples/layernorm/problem.py examples/layernorm/candidates.py::masked_statistics} \
          --profile "${SAMPLED_PROFILE:-default}" --json /tmp/sampled-warm.json > "$out/sampled-warm.log" 2>&1
      fi
      timeout -s INT "${LIMIT:-600}" "${PYSPY:-build/pyspy/py-spy}" record --rate "${RATE:-200}" \
        --idle --threads --subprocesses --format raw -o /tmp/sampled.txt -- \
        env KERNELAUDIT_SANDBOX=off python3 -m kernelaudit.cli check \
        ${SAMPLED:-examples/layernorm/problem.py examples/layernorm/candidates.py::masked_statistics} \
        --profile "${SAMPLED_PROFILE:-default}" --json "$out/sampled.json" > "$out/sampled.log" 2>&1
      # an audit cut short by LIMIT (the pattern anchored: a shell whose command line names the
      # audit, the one that called this script say, is not it)
      pkill -INT -f '^(\S*/)?python3 -m kernelaudit.cli check' && sleep 5
      gzip -c /tmp/sampled.txt > "$out/sampled.txt.gz"
      python3 benchmarks/sampled_profile.py /tmp/sampled.txt > "$out/sampled-summary.txt"
      head -n 20 "$out/sampled-summary.txt"
      ;;
    sandbox)
      # the sandbox on a GPU: is it there, do the GPU paths work in it, and what it costs
      python3 -c 'from kernelaudit.runner.auditor.sandbox import isolation; print(isolation())' | tee "$out/sandbox.txt"
      python3 -m pytest -q -p no:cacheprovider -rfE -m "gpu or not gpu" tests/redteam \
        tests/sanitizer/test_sanitizer_gpu.py tests/interpret/test_one_past_the_end_gpu.py \
        tests/checks/test_races_check.py tests/checks/test_memory_check.py \
        tests/runner > "$out/sandbox-tests.txt" 2>&1
      note $? "$out/sandbox-tests.txt"
      tail -n 5 "$out/sandbox-tests.txt"
      python3 benchmarks/sandbox_overhead.py --sol "${PROBLEMS:-build/solexecbench}/L1/016_rope_inverse_frequency_computation" \
        --device cuda --rounds "${ROUNDS:-2}" --out "$out/sandbox-overhead-gpu.json" 2>&1 | tail -n 8
      ;;
    trust)
      # the red-team and unwatched runs on the GPU, and one SOL reference audited as its own
      # candidate (quick), its findings listed
      python3 -m pytest -q -p no:cacheprovider -rfE tests/redteam tests/runner/auditor/test_threads.py \
        tests/checks/test_memory_check.py > "$out/trust-tests.txt" 2>&1
      note $? "$out/trust-tests.txt"
      tail -n 6 "$out/trust-tests.txt"
      sol="${PROBLEMS:-build/solexecbench}"
      for problem in ${TRUST_PROBLEMS:-L1/016_rope_inverse_frequency_computation}; do
        name=$(basename "$problem")
        python3 benchmarks/solexecbench_scale.py "$sol" --out "$out/trust-$name.json" \
          --profile quick --timeout 240 --device cuda --only "$name" 2>&1 | tail -n 4
        python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(json.dumps(r, indent=1)[:3000])' "$out/trust-$name.json"
      done
      ;;
    timing)
      python3 benchmarks/timing_agreement.py --device cuda --out "$out/timing.json" 2>&1 | tee "$out/timing.txt"
      ;;
    bench)
      python3 benchmarks/audit_examples.py --profiles quick default --rounds 2 --out "$out/bench.json" 2>&1 | tee "$out/bench.txt"
      ;;
    worker-channel)
      # a probe's round trip to the worker at 1-256 MB, then SOL problems whose probes move
      # large tensors, audited (default) alternately by the code in BASE (the version before)
      # and by this one: BASE=build/base (a copy of the old src folder's parent)
      for version in ${BASE:+before} after; do
        src="$PWD/src"; [ "$version" = before ] && src="$PWD/$BASE/src"
        PYTHONPATH="$src" python3 benchmarks/worker_channel.py --device cuda \
          --out "$out/worker-channel-$version.json" 2>&1 | tail -n 4
      done
      for problem in ${AB_PROBLEMS:-FlashInfer-Bench/008_ L1/072_}; do
        for version in ${BASE:+before} after; do
          src="$PWD/src"; [ "$version" = before ] && src="$PWD/$BASE/src"
          name="$(echo "$problem" | tr '/' '_')$version"
          PYTHONPATH="$src" python3 benchmarks/solexecbench_scale.py "${PROBLEMS:-build/solexecbench}" \
            --out "$out/ab-$name.json" --work "/tmp/ab-$name" --profile default \
            --timeout "${TIMEOUT:-170}" --device cuda --only "$problem" 2>&1 | tail -n 2
        done
      done
      ;;
    training)
      python3 benchmarks/training_check.py --device cuda --out "$out/training.json" 2>&1 | tee "$out/training.txt"
      ;;
    channel)
      # one slot call of each example through the training check's channel, against the call
      # in the auditor, with a profile of the channel's calls
      python3 benchmarks/training_channel.py --device cuda --out "$out/training-channel.json" \
        --profile "$out/training-channel-profile.txt" 2>&1 | tail -n 5
      ;;
    thorough)
      python3 -m kernelaudit.cli demo --profile thorough --json "$out/thorough.json" > "$out/thorough.txt" 2>&1
      echo "thorough demo exit code $?" | tee -a "$out/thorough.txt"
      tail -n 40 "$out/thorough.txt"
      ;;
  esac
done
exit $failed
