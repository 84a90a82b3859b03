#!/usr/bin/env bash
# gpulab's GPU kernels under one Triton, on a Hopper GPU, for the side-by-side that decides
# gpulab.gluon_compat.TESTED_TRITON (and version 2's WS_RACE_FREE_TRITON).
#
#   bash scripts/gpu_triton.sh [WHEEL]
#
# WHEEL: a triton-*.whl for this Python, installed with --no-deps beside the machine's torch into /tmp/tri (no network
# needed), or a folder holding an unpacked Triton (triton/ and its dist-info); without it, the machine's own Triton. Runs, each boxed in time (at most 9.5 minutes in all, the boxes
# summed; less when they finish early):
#   1. python -m gpulab info (which versions this machine runs, with GPULAB_ALLOW_UNTESTED_TRITON=1 set for the run)
#   2. version 3's GPU tests: forward and backward against the references, and their race tests
#   3. bench 05 v3-check (every variant checked against the reference) and v3-race (each variant RACE_RUNS times)
#   4. version 2's warp-specialized loop: RACE_RUNS runs per problem, bit-equal to each other and close to SDPA
#   5. the fused RNN's Gluon GPU tests (versions 6 and b4)
#   6. bench 05 v3 on the lesson's main problems (bf16, N = 4k and 16k, head dims 64 and 128, causal and not)
# Records (each carries its Triton version in 'triton') and logs go to $OUT/triton-<version>/ (OUT defaults to
# ./gpu_triton_out); summary.txt there lists each step's exit status (124: it ran out of its time box).
# STEPS (names of the steps above, space-separated; default all) runs only those, e.g. STEPS="info v3-grid";
# V3_TESTS_BOX (seconds, default 140) is step 2's box.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-$PWD/gpu_triton_out}
RACE_RUNS=${RACE_RUNS:-50}
if [ $# -ge 1 ] && [ -d "$1" ]; then  # an unpacked Triton (its triton/ folder inside)
    export PYTHONPATH=$(cd "$1" && pwd):$PWD
elif [ $# -ge 1 ]; then
    rm -rf /tmp/tri
    "$PY" -m pip install -q --no-index --no-deps --target /tmp/tri "$1" || exit 1
    export PYTHONPATH=/tmp/tri:$PWD
else
    export PYTHONPATH=$PWD
fi
export GPULAB_ALLOW_UNTESTED_TRITON=1
TV=$("$PY" -c "import triton; print(triton.__version__)") || exit 1
RES=$OUT/triton-$TV
mkdir -p "$RES"
SUMMARY=$RES/summary.txt
echo "triton $TV, torch $("$PY" -c 'import torch; print(torch.__version__)'), $(date -u +%FT%TZ)" > "$SUMMARY"
# version 3's tests in 4 processes (their time is mostly compiling); the RNN's cooperative launches in one
XDIST=$("$PY" -c "import xdist" 2>/dev/null && echo "-n 4")

step() {  # step NAME SECONDS COMMAND...: run it boxed, log it, note its status
    local name=$1 box=$2
    shift 2
    case " ${STEPS:-all} " in *" all "*|*" $name "*) ;; *) echo "$name: skipped" >> "$SUMMARY"; return ;; esac
    local t0=$SECONDS
    timeout "$box" "$@" > "$RES/$name.log" 2>&1
    local rc=$?
    echo "$name: rc=$rc in $((SECONDS - t0)) s (box $box s)" | tee -a "$SUMMARY"
}

step info 60 "$PY" -m gpulab info
step v3-gpu-tests "${V3_TESTS_BOX:-140}" "$PY" -m pytest -q -m gpu $XDIST -p no:nbval -p no:cacheprovider \
    tests/attention/v3/test_v3_gpu.py tests/attention/v3/test_v3_backward_gpu.py
step v3-check-race 110 "$PY" - "$RES" "$RACE_RUNS" <<'EOF'
import sys
from pathlib import Path
from gpulab import bench, hardware, lessons
root, runs = Path(sys.argv[1]), int(sys.argv[2])
for part, kwargs in (("v3-check", {}), ("v3-race", dict(runs=runs))):
    results = lessons.benchmark("05", part)(**kwargs)  # the lesson's parts, wherever their modules live
    folder = root / "05_attention_hopper" / lessons.part_folder("05", part)
    path = folder / f"{hardware.gpu_slug(results[0].device)}-{results[0].date}-{part}.jsonl"
    print(bench.table(results))
    print("wrote", bench.save(results, "05", path=path))
    bad = [r for r in results if r.params.get("check", "ok") != "ok" or r.params.get("differing", 0)]
    print(f"{part}: {len(bad)} of {len(results)} records not clean")
EOF
step v2-ws-race 45 env GPULAB_ALLOW_WARP_SPECIALIZE=1 "$PY" - "$RES" "$RACE_RUNS" <<'EOF'
import json, sys, torch, triton
import torch.nn.functional as F
from gpulab.attention.configs import HopperConfig
from gpulab.attention.plan import attention_forward
runs, rows = int(sys.argv[2]), []
for d in (64, 128):
    for causal in (False, True):
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(4, 1024 // d // 2, 2000, d, device="cuda", dtype=torch.bfloat16, generator=g)
                   for _ in range(3))
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
        cfg = HopperConfig(128, 64, 4, 2, warp_specialize=True)
        first = attention_forward(q, k, v, is_causal=causal, config=cfg)[0]
        differing = sum(not torch.equal(attention_forward(q, k, v, is_causal=causal, config=cfg)[0], first)
                        for _ in range(runs))
        err = ((first.float() - ref).norm() / ref.norm()).item()
        rows.append(dict(case="v2 warp-specialized race", head_dim=d, causal=causal, runs=runs, differing=differing,
                         rel_err=err, ok=differing == 0 and err < 2e-2, triton=triton.__version__))
        print(rows[-1])
with open(f"{sys.argv[1]}/v2_ws_race.jsonl", "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in rows)
sys.exit(0 if all(r["ok"] for r in rows) else 1)
EOF
step rnn-gluon-tests 90 "$PY" -m pytest -q -m gpu -p no:nbval -p no:cacheprovider \
    tests/rnn/fused/test_split_gluon.py tests/rnn/fused/test_split_gluon_backward.py
step v3-grid 110 "$PY" - "$RES" <<'EOF'
import sys
from pathlib import Path
import torch
from gpulab import bench, hardware, lessons
# the lesson's grid (16k tokens a problem, model width 1024) at bf16 and its two longest lengths
problems = [dict(dtype=torch.bfloat16, batch=16384 // n, heads=1024 // d, seq=n, head_dim=d, causal=c)
            for d in (64, 128) for n in (4096, 16384) for c in (False, True)]
results = lessons.benchmark("05", "v3")(problems=problems)
folder = Path(sys.argv[1]) / "05_attention_hopper" / lessons.part_folder("05", "v3")
path = folder / f"{hardware.gpu_slug(results[0].device)}-{results[0].date}-v3.jsonl"
print(bench.table(results))
print("wrote", bench.save(results, "05", path=path))
EOF
cat "$SUMMARY"
