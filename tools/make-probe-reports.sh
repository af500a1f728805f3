#!/usr/bin/env bash
# Regenerates the sample probe reports in tests/probe-reports/ by running vram-probe against the
# simulated NVML (crates/nvml-sim) with the scenarios in scenarios/. `vram calibrate`'s tests and
# docs/probe.md read these reports; the probe's tests check they still parse.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p vram-probe -p nvml-sim
# Relative, so the reports record no machine-specific path (the runs below start in this folder).
lib="../../target/debug/libnvml_sim.so"
cd tests/probe-reports
job() {
  # A workload that reports its framework view (without torch: peaks given by hand) and a loss.
  echo "import sys; sys.path.insert(0, '../../python'); import vram_probe_report as v; \
v.set_devices([{'index': 0, 'allocated_peak': $1, 'reserved_peak': $2}], framework='pytorch', \
framework_version='2.5.1', cuda_version='12.4'); v.set_quality('eval_loss', $3, higher_is_better=False)"
}
run() {
  local name=$1 check=$2 script=$3
  VRAM_NVML_SIM_SCENARIO="scenarios/$name.json" ../../target/debug/vram-probe --nvml-lib "$lib" \
    run --check "$check" plan.vram --out "$name.json" -- sh -c "sleep 0.2; python3 -c \"$script\"" \
    2>/dev/null || true
  # Times, rates and the kernel differ from run to run; the sample keeps them as measured.
}
run h100-run1 "job on h100-sxm-80gb" "$(job 7516192768 8589934592 1.412)"
run h100-run2 "job on h100-sxm-80gb" "$(job 7516192768 8321499136 1.415)"
run a100-run1 "job on a100-sxm4-80gb" "$(job 7000000000 7516192768 1.409)"
ls -l ./*.json
