"""DRAM bytes counted by Nsight Compute for the course's kernels and their naive peers (issue: IO made visible).

Run on a GPU machine with ncu (one case per process, only the measured call between cudaProfilerStart/Stop):

    bash scripts/ncu_traffic.sh        # every case; writes $OUT/ncu_traffic.jsonl (records) and the raw CSV

or one case by hand: ncu --profile-from-start off --csv --metrics dram__bytes_read.sum,dram__bytes_write.sum \
    python scripts/ncu_traffic.py run CASE
`python scripts/ncu_traffic.py records RAW_DIR OUT.jsonl` turns the raw CSVs into records beside the model's
fewest bytes (each input read once, each output written once).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

import gpulab
from gpulab import bench, traffic

B, H, N, D = 8, 16, 4096, 64  # attention: O is 67 MB, past the 50 MB L2 (outputs that fit stay in L2: no DRAM write)
RB, RT, RNH, RDH = 16, 256, 12, 64  # fused RNN: the lesson's main problem, 256 steps
COPY_BYTES = 256 << 20


def _attention_inputs(grad=False):
    g = torch.Generator(device="cuda").manual_seed(0)
    return [torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_(grad)
            for _ in range(3)]  # fmt: skip


def _rnn_inputs(grad=False):
    from gpulab.rnn import functions

    fn = functions.get_function("lstm")
    g = torch.Generator(device="cuda").manual_seed(0)
    wx = torch.randn(RB, RT, fn.gates_w, RNH, RDH, device="cuda", generator=g).bfloat16().requires_grad_(grad)
    r = (torch.randn(fn.gates_r, RNH, RDH, RDH, device="cuda", generator=g) / RDH**0.5).bfloat16().requires_grad_(grad)
    b = torch.zeros(fn.gates_b, RNH, RDH, device="cuda", dtype=torch.bfloat16).requires_grad_(grad)
    return wx, r, b


def _attention(kind, backward):
    from gpulab import attention

    q, k, v = _attention_inputs(backward)
    f = attention.flash_attention if kind == "flash" else attention.naive_attention

    def call():
        o = f(q, k, v, is_causal=False)
        if backward:
            o.backward(torch.ones_like(o))

    return call


def _rnn(backend, backward):
    from gpulab.rnn import flashrnn

    wx, r, b = _rnn_inputs(backward)

    def call():
        out, _ = flashrnn(wx, r, b, function="lstm", backend=backend)
        if backward:
            out[0].sum().backward()

    return call


def _copy(kind):
    from gpulab import memory

    src = torch.randn(COPY_BYTES // 4, device="cuda")
    dst = torch.empty_like(src)
    return (lambda: memory.copy(src, dst)) if kind == "gpulab" else (lambda: dst.copy_(src))


LADDER_SEQ = int(os.environ.get("NCU_LADDER_SEQ", "4"))
"""Time steps of the ladder's problem under ncu (the article's 4 layers, hidden 512, batch 64; 100 steps launch too
many kernels for ncu's replays): the pattern per cell (weights re-read or kept in L2) is what the count shows."""


def _ladder(step):
    from gpulab.rnn import ladder

    module, weights, x = ladder.make_problem(torch.float16, seq=LADDER_SEQ)
    if step == "cuDNN":
        return lambda: module(x)
    return lambda: ladder.run_step(step, x, weights)


def _ladder_min_bytes() -> float:
    from gpulab.rnn import ladder

    p = ladder.problem()
    layers, hidden, batch = p["layers"], p["hidden"], p["batch"]
    weights = layers * (2 * 4 * hidden * hidden + 2 * 4 * hidden) * 2  # W_ih, W_hh (input = hidden), two biases
    return weights + 2 * batch * LADDER_SEQ * hidden * 2  # + x read once, y written once (fp16)


def _min_bytes(case: str) -> float:
    """The fewest bytes each case must move (bf16 = 2 bytes): inputs read once, outputs written once."""
    qkv = 3 * B * H * N * D * 2
    if case.startswith("04"):
        fwd = qkv + B * H * N * D * 2 + B * H * N * 4  # q, k, v in; O and LSE out
        bwd = qkv + 2 * B * H * N * D * 2 + B * H * N * 4 + qkv  # q, k, v, O, dO, LSE in; dQ, dK, dV out
        return fwd + bwd if "bwd" in case else fwd
    if case.startswith("03"):
        return _ladder_min_bytes()
    if case.startswith("06"):
        wx, r, out = RB * RT * 4 * RNH * RDH * 2, 4 * RNH * RDH * RDH * 2, 2 * RB * RT * RNH * RDH * 2
        fwd = wx + r + out
        return fwd + (out + r + wx + r) if "bwd" in case else fwd  # backward: read states and R, write dWx and dR
    return 2.0 * COPY_BYTES


LADDER = {f"03 step{k}": (lambda k=k: _ladder(k)) for k in (0, 3, 5, 6, 7)} | {"03 cuDNN": lambda: _ladder("cuDNN")}
"""The cuDNN ladder under ncu: opt-in (NCU_LADDER=1), at :data:`LADDER_SEQ` steps: the early steps launch tens of
kernels per cell, each replayed by ncu (all steps at 100 time steps did not finish in 400 s on the H100)."""

CASES = {
    "00 copy gpulab": lambda: _copy("gpulab"),
    "04 naive fwd": lambda: _attention("naive", False),
    "04 flash fwd": lambda: _attention("flash", False),
    "04 naive fwd+bwd": lambda: _attention("naive", True),
    "04 flash fwd+bwd": lambda: _attention("flash", True),
    "06 alternating fwd": lambda: _rnn("alternating", False),
    "06 fused fwd": lambda: _rnn("fused", False),
    "06 alternating fwd+bwd": lambda: _rnn("alternating", True),
    "06 fused fwd+bwd": lambda: _rnn("fused", True),
}


def run(case: str) -> None:
    call = CASES[case]()
    torch.set_grad_enabled("bwd" in case)
    call()  # compile and warm up outside the profiled region
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def records(raw_dir: str, out: str) -> None:
    recs = []
    for path in sorted(Path(raw_dir).glob("*.csv")):
        case = path.stem.replace("_", " ").replace("fwd bwd", "fwd+bwd")
        rows = traffic.parse_ncu_csv(path.read_text())
        read = sum(r.get("dram_read", 0.0) for r in rows)
        write = sum(r.get("dram_write", 0.0) for r in rows)
        r = bench.record(lesson=case[:2], case=f"ncu {case[3:]}", bytes=_min_bytes(case))
        if case.startswith("03"):
            r.params["seq"] = LADDER_SEQ
        l2 = sum(r.get("lts__t_bytes.sum", 0.0) for r in rows)
        r.params.update(dram_read=read, dram_write=write, l2_bytes=l2, kernels=len(rows),
                        counted_over_min=(read + write) / r.bytes)  # fmt: skip
        recs.append(r)
        print(f"{case:28s} kernels {len(rows):5d}  read {read / 1e6:10.1f} MB  write {write / 1e6:10.1f} MB  "
              f"L2 {l2 / 1e6:10.1f} MB  minimum {r.bytes / 1e6:9.1f} MB  x{(read + write) / r.bytes:6.2f}")  # fmt: skip
    with open(out, "w") as f:
        for r in recs:
            f.write(json.dumps(r.to_dict()) + "\n")


if os.environ.get("NCU_LADDER") == "1":
    CASES.update(LADDER)
if os.environ.get("NCU_ONLY"):  # a prefix, e.g. NCU_ONLY=03 for the ladder's cases alone
    CASES = {k: v for k, v in CASES.items() if k.startswith(os.environ["NCU_ONLY"])}


if __name__ == "__main__":
    assert gpulab.runtime.on_gpu(), "needs a CUDA GPU"
    if sys.argv[1] == "list":
        print("\n".join(c.replace(" ", "_").replace("+", "_") for c in CASES))
    elif sys.argv[1] == "run":
        run(sys.argv[2].replace("fwd_bwd", "fwd+bwd").replace("_", " "))
    else:
        records(sys.argv[2], sys.argv[3])
