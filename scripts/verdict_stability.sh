#!/usr/bin/env bash
# Issue 24 §1: the planted / ground-truth verdicts must not flip with float rounding. Runs the tests that hold those
# verdicts (truth, decodeshare, crh, sae-synthetic, pcfg depth, atlas) under each perturbation and prints one
# summary line per condition; the knobs are read by tests/conftest.py (`_verdict_stability_knobs`).
#   bash scripts/verdict_stability.sh            (after `bash scripts/setup.sh install`; ~30 s per condition on a 2-core AMD EPYC)
set -uo pipefail
cd "$(dirname "$0")/.."
. "${INTERPLAB_VENV:-.venv}/bin/activate"
TESTS=(tests/truth_scores/test_validation.py tests/decodeshare/test_validation.py tests/crh/test_validation.py
       tests/crh/test_shape_selection.py tests/sae/test_synthetic.py tests/sae/test_sequential.py
       tests/pcfg/test_zoo_pcfg.py tests/pcfg/test_probes.py tests/lenses/test_atlas.py)
CONDITIONS=(
  "2 threads (baseline)|INTERPLAB_TEST_THREADS=2"
  "1 thread|INTERPLAB_TEST_THREADS=1"
  "OPENBLAS_CORETYPE=Haswell|INTERPLAB_TEST_THREADS=2 OPENBLAS_CORETYPE=Haswell"
  "torch and MKL on AVX2 kernels (what an AVX2-only CPU runs)|INTERPLAB_TEST_THREADS=2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2"
  "1e-6 relative weight noise|INTERPLAB_TEST_THREADS=2 INTERPLAB_TEST_WEIGHT_NOISE=1e-6"
  "1e-4 relative weight noise (the margin, 100x the asked perturbation)|INTERPLAB_TEST_THREADS=2 INTERPLAB_TEST_WEIGHT_NOISE=1e-4"
)
status=0
for c in "${CONDITIONS[@]}"; do
  name="${c%%|*}"; vars="${c#*|}"
  line=$(env -u OPENBLAS_CORETYPE $vars python -m pytest -q -p no:cacheprovider "${TESTS[@]}" 2>&1 | tail -1)
  echo "$name: $line"
  case "$line" in *failed*|*error*) status=1;; esac
done
exit $status
