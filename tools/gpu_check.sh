#!/usr/bin/env bash
# GPU check: paper-scale speed, the default pipeline and the test suite on a CUDA machine.
#
#   bash tools/gpu_check.sh [OUTDIR]      (from the repository root, in an environment with intact's
#                                          dependencies; OUTDIR defaults to results/gpu_check)
#
# First, OUTDIR/dependencies.txt: the declared dependencies missing there and the exact pins not met
# (tools/check_dependencies.py), the likely cause of a test that fails only there. Then the tests only a GPU answers
# (DEVICE_TESTS: the CUDA-only ones, every method through two tasks on the GPU, ESN and CPrompt), in minutes:
# OUTDIR/device_tests.log (step 2 leaves these files out).
# 0. Paper scale (issue 10): `intact speed` on ViT-B/16 at batch 64 in bf16 (coda_p, coda_p+intact,
#    caches on/off: OUTDIR/speed.json|txt), then a few hundred real training steps of coda_p+intact on a
#    synthetic 224-px ImageNet-R-layout tree (tools/paper_scale_check.py: images/s, peak memory, per-task
#    state size: OUTDIR/paper_scale.json|txt). PAPER_SCALE=tiny runs both at toy sizes (a CPU check of the
#    script: ALLOW_CPU=1 PAPER_SCALE=tiny ONLY_PAPER_SCALE=1 bash tools/gpu_check.sh); PAPER_SCALE=off skips.
#    ONLY_PAPER_SCALE=1 stops after this step (a short device check).
# 1. Runs the default target (coda_p and coda_p+intact, 3 seeds, bf16 autocast) on the GPU with
#    tracking off, and writes the measured wall time, per-task training time, throughput and peak
#    GPU memory to OUTDIR/summary.md (plus the AA table and the R matrices in OUTDIR/results.tar.gz).
# 2. Runs the test suite on the GPU (every train/evaluate test picks CUDA when it is visible), except
#    the SLURM and MLflow tests, which need services rather than a GPU; each failure's traceback goes to
#    OUTDIR/failures.txt as it fails (tools/pytest_failures_now.py).
# Each step can be given a wall-clock limit in seconds (DEVICE_TEST_TIMEOUT, SPEED_TIMEOUT, SCALE_TIMEOUT,
# PIPELINE_TIMEOUT, TEST_TIMEOUT; 0 = none, the default except for the tests' 300 and 600), so that a short device
# lease ends with every step's output; TEST_WORKERS=N runs step 2's tests on N xdist workers (--dist loadfile).
# CI never runs this: it has no GPU. Exit status: non-zero if any step failed.
set -uo pipefail
out=${1:-results/gpu_check}
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"

# what a failure below may come from: a declared dependency missing there, or another version of a pinned one
"$py" tools/check_dependencies.py | tee "$out/dependencies.txt"
"$py" - <<'EOF' | tee "$out/device.txt" || exit 1
import os, platform, torch, timm, snakemake
if not torch.cuda.is_available():
    if not os.environ.get("ALLOW_CPU"):  # ALLOW_CPU=1: try the script itself on a CPU machine
        raise SystemExit("no CUDA device is visible")
    name, gib = "CPU", 0
else:
    p = torch.cuda.get_device_properties(0)
    name, gib = p.name, p.total_memory / 2**30
print(f"device: {name}, {gib:.0f} GiB; python {platform.python_version()}, "
      f"torch {torch.__version__} (CUDA {torch.version.cuda}), timm {timm.__version__}, snakemake {snakemake.__version__}")
EOF

# ---- first: the tests only a GPU can answer (minutes), before the long steps -----------------------------
# the CUDA-only tests, every method through two tasks on the GPU (tests/test_devices.py) and ESN / CPrompt, whose
# fixtures failed on the H200 of 2026-11-28; the suite of step 2 leaves these files out
DEVICE_TESTS=(tests/test_cuda.py tests/test_devices.py tests/test_guard.py tests/test_esn_consistent_prompt.py)
rm -f "$out/failures.txt"   # each failure's traceback as it fails, here and in step 2
PYTEST_FAILURES="$out/failures.txt" PYTHONPATH="$PWD/tools:$PYTHONPATH" \
    timeout "${DEVICE_TEST_TIMEOUT:-300}" "$py" -m pytest -q -p no:cacheprovider -p pytest_failures_now -rfEs \
    "${DEVICE_TESTS[@]}" > "$out/device_tests.log" 2>&1
device_rc=$?
tail -8 "$out/device_tests.log"
echo "device tests: exit $device_rc (log: $out/device_tests.log; failures: $out/failures.txt)"

# ---- 0. paper scale ------------------------------------------------------------------------------------
scale=${PAPER_SCALE:-full}
scale_rc=0
if [ "$scale" != off ]; then
    if [ "$scale" = tiny ]; then
        dev=$("$py" -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')
        speed_args=(--model vit_rgb_p8 --batch 8 --device "$dev" --repeats 3 --classes 10 --config config.yaml)
        scale_args=(--model vit_rgb_p8 --size 32 --batch 8 --steps 20 --epochs 2)
    else
        speed_args=(--model vit_base_patch16_224 --batch 64 --device cuda --repeats 10)
        scale_args=(--batch 64 --steps 300 --epochs 5)
    fi
    timeout "${SPEED_TIMEOUT:-0}" "$py" -m intact.cli speed "${speed_args[@]}" --json "$out/speed.json" 2>"$out/speed.log" | tee "$out/speed.txt"
    speed_rc=${PIPESTATUS[0]}
    rm -rf "$out/paper_scale"
    timeout "${SCALE_TIMEOUT:-0}" "$py" tools/paper_scale_check.py "$out/paper_scale" "${scale_args[@]}" 2>"$out/paper_scale.log" | tee "$out/paper_scale.txt"
    paper_rc=${PIPESTATUS[0]}
    [ -f "$out/paper_scale/paper_scale.json" ] && cp "$out/paper_scale/paper_scale.json" "$out/paper_scale.json"
    rm -rf "$out/paper_scale"   # the tree, the prepared data and the states: only the summary is kept
    echo "paper scale ($scale): speed exit $speed_rc, training exit $paper_rc (logs: $out/speed.log, $out/paper_scale.log)"
    scale_rc=$(( speed_rc != 0 || paper_rc != 0 ))
    [ $scale_rc -eq 0 ] || tail -n 20 "$out/speed.log" "$out/paper_scale.log"
fi
[ -n "${ONLY_PAPER_SCALE:-}" ] && exit $(( scale_rc != 0 || device_rc != 0 ))

# ---- 1. the default pipeline ------------------------------------------------------------------------
printf 'tracking:\n  enabled: false\n' > "$out/no_tracking.yaml"
t0=$(date +%s%N)
timeout "${PIPELINE_TIMEOUT:-0}" "$py" -m snakemake --cores all --configfile config.yaml "$out/no_tracking.yaml" > "$out/pipeline.log" 2>&1
pipeline_rc=$?
wall_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "pipeline: exit $pipeline_rc after $wall_ms ms (log: $out/pipeline.log)"
[ $pipeline_rc -eq 0 ] || tail -40 "$out/pipeline.log"
"$py" - "$out" "$wall_ms" <<'EOF' | tee "$out/summary.md"
import json, sys
from pathlib import Path
import pandas as pd

out, wall = Path(sys.argv[1]), float(sys.argv[2]) / 1000
print((Path(out) / "device.txt").read_text().strip(), (Path(out) / "dependencies.txt").read_text().strip(),
      f"\n\ndefault pipeline wall time: {wall:.1f} s\n", sep="\n")
rows = []
for f in sorted(Path("results/runs").glob("*/*/seed*/task*/train.json")):
    r = json.loads(f.read_text())
    rows.append({"method": r["method"], "seed": r["seed"], "task": r["task"], "seconds": r["seconds"],
                 "images_per_s": r["images_per_s"], "peak_memory_mb": r["peak_memory_mb"],
                 "certificate": r.get("certificate")})
if rows:
    df = pd.DataFrame(rows)
    print("training, per task (mean over seeds and tasks):\n")
    print(df.groupby("method")[["seconds", "images_per_s", "peak_memory_mb"]].mean().round(2).to_markdown(), "\n")
    print("certificate after the last task, per seed:\n")
    last = df[df.task == df.task.max()].pivot(index="seed", columns="method", values="certificate")
    print(last.to_markdown(floatfmt=".3g"), "\n")
for table in sorted(Path("results/tables").glob("*/default_run.md")):
    print(f"{table}:\n\n{table.read_text()}")
EOF
tar czf "$out/results.tar.gz" results/tables results/figures $(ls results/runs/*/*/seed*/R.csv results/runs/*/*/seed*/metrics.json results/runs/*/*/seed*/task*/train.json 2>/dev/null)

# ---- 2. the test suite on the GPU --------------------------------------------------------------------
workers=()
[ -n "${TEST_WORKERS:-}" ] && workers=(-n "$TEST_WORKERS" --dist loadfile)
# each failure's traceback as it fails, after the device tests' (a run cut by TEST_TIMEOUT keeps them)
PYTEST_FAILURES="$out/failures.txt" PYTHONPATH="$PWD/tools:$PYTHONPATH" \
    timeout "${TEST_TIMEOUT:-600}" "$py" -m pytest -q -p no:cacheprovider -p pytest_failures_now -rfEs --durations=8 \
    "${workers[@]}" tests "${DEVICE_TESTS[@]/#/--ignore=}" \
    --ignore=tests/test_tracking.py --ignore=tests/test_slurm.py > "$out/pytest.log" 2>&1
tests_rc=$?
tail -25 "$out/pytest.log"
echo "tests: exit $tests_rc (log: $out/pytest.log)"
exit $(( device_rc != 0 || scale_rc != 0 || pipeline_rc != 0 || tests_rc != 0 ))
