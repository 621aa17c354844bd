#!/usr/bin/env bash
# The GPU tier (make test-gpu), for a machine with an NVIDIA GPU and driver:
#   - the device plugin on real NVML: fingerprint, attributes, plausible
#     power, temperature and memory stats, and a reservation;
#   - the driver running a CUDA probe as its engine, under the environment
#     it computes from that reservation: CUDA must show the probe exactly
#     its GPUs, and the driver's NVML must see the probe's memory on them.
# Every test skips, saying why, where NVML or a GPU is missing; the summary
# at the end lists what ran and what skipped. A few minutes on a GPU box.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${LLMGW_BIN_DIR:?set LLMGW_BIN_DIR to the built binaries (make test-gpu does)}"
GO=${GO:-go}

echo "== nvidia-smi -L (NVML's list of every GPU; NVML ignores CUDA_VISIBLE_DEVICES)"
if command -v nvidia-smi >/dev/null; then nvidia-smi -L 2>&1; else echo "(nvidia-smi is not installed here)"; fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
LLMGW_TEST_GPU=1 "$GO" test -count=1 -timeout 10m -v -run '^TestGPUTier' ./devices/ ./driver/ 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

echo "== GPU tier: $(grep -c -- '^--- PASS' "$log") passed, $(grep -c -- '^--- FAIL' "$log") failed, $(grep -c -- '^--- SKIP' "$log") skipped"
if grep -q -- '^--- SKIP' "$log"; then
  echo "skipped because:"
  grep -E '^\s+\S+_test\.go:[0-9]+: skipping' "$log" | sed -E 's/^\s+\S+: //' | sort -u | sed 's/^/  /'
fi
exit "$rc"
