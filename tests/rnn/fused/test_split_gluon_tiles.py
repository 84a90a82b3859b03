"""Version 6's forward with several batch tiles per program (split_gluon_tiles): its float64 schedule against the
vanilla backend's LSTM at odd batches (groups of tiles, the last tile partial), its sm_90 compile (no GPU), and on a
GPU the kernel against the schedule."""

import json
import subprocess
import sys

import pytest
import torch

from gpulab import check, rnn, runtime
from gpulab.rnn.fused import split_gluon as v6
from gpulab.rnn.fused import split_gluon_tiles as st


def _float64(inputs):
    out, last = rnn.flashrnn(*(t.double() for t in inputs), function="lstm", backend="vanilla")
    return out, last


@pytest.mark.parametrize("B, NH, DH, kw", [(17, 1, 64, dict(block_u=8, block_b=8, warps=2, tiles=2)),
                                           (33, 2, 32, dict(block_u=8, block_b=8, warps=2, tiles=4)),
                                           (1, 1, 64, dict(block_u=16, block_b=16, warps=4, tiles=3))])  # fmt: skip
def test_schedule_matches_float64(B, NH, DH, kw, make_inputs):
    """17 rows in groups of 2 tiles of 8 (two groups, the second with one row), 33 rows in one group of 4 tiles plus
    a group of one row, 2 heads; every output written (NaN-poisoned) and equal to float64's LSTM."""
    inputs = make_inputs("lstm", B, 5, NH, DH, dtype=torch.float32, seed=B + DH)
    out, last, gates = st.schedule_reference(*inputs, cfg=v6.v6_config(DH, **kw))
    want, want_last = _float64(inputs)
    check.assert_close(out, want, rtol=1e-10, name="states_all")
    check.assert_close(last, want_last, rtol=1e-10, name="states_last")
    assert torch.isfinite(gates).all()


def test_schedule_sees_a_unit_from_the_wrong_gate(make_inputs):
    """The comparison can fail: R with two gates swapped gives other states."""
    inputs = list(make_inputs("lstm", 17, 3, 1, 64, dtype=torch.float32, seed=1))
    want, _ = _float64(inputs)
    inputs[1] = inputs[1][[1, 0, 2, 3]]
    out, _, _ = st.schedule_reference(*inputs, cfg=v6.v6_config(64, 8, 8, 2, tiles=2))
    with pytest.raises(AssertionError):
        check.assert_close(out, want, rtol=1e-6, name="states_all")


def test_groups_and_programs():
    cfg = v6.v6_config(1024, 16, 16, 8, tiles=2)
    assert cfg.groups(64) == 2 and cfg.programs(64, 1, 1024) == 128 and cfg.groups(17) == 1
    with pytest.raises(ValueError, match="tiles=17"):
        v6.v6_config(768, tiles=17)


@pytest.mark.parametrize("spec", ["768,16,8,8,2"])
def test_compiles_for_sm90_without_spills(spec):
    """One head of 768 in 16 units, 8-row tiles, 8 warps, 2 tiles per program: compiles for sm_90 without spilling;
    the innermost loop is one tile's (4 M x 6 K tensor-core steps per warp: the loop over tiles is not unrolled)."""
    code = (
        "import torch; torch.cuda.is_available = lambda: True\n"
        "import json\nfrom gpulab.rnn.fused import split_gluon_tiles as st, split_gluon as v6\n"
        "from gpulab.rnn.fused.measure import sass\n"
        f"dh, bu, bb, w, tiles = {spec}\n"
        "k = st.compile_sm90(dh, v6.v6_config(dh, bu, bb, w, tiles=tiles), 'fp16')\n"
        "body, ops, regs = sass.loop_stats(k, 'tiles_check')\n"
        "print(json.dumps(dict(registers=regs, spills=sum(c for o, c in ops.items() if o.startswith(('STL', 'LDL'))),"
        " mma=sum(c for o, c in ops.items() if 'MMA' in o))))\n"
    )
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "GPULAB_DEVICE")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["spills"] == 0 and 0 < row["registers"] <= 255 and row["mma"] == 24  # one tile: the loop over tiles


@pytest.mark.gpu
@pytest.mark.parametrize("B, DH, kw", [(33, 768, dict(block_u=16, block_b=8, warps=8, tiles=3)),
                                       (256, 768, dict(block_u=16, block_b=8, warps=8, tiles=16)),
                                       (64, 1024, dict(block_u=16, block_b=16, warps=8, tiles=2)),
                                       (17, 1024, dict(block_u=8, block_b=16, warps=8, tiles=2))])  # fmt: skip
def test_tiles_on_gpu(B, DH, kw, make_inputs):
    """The kernel (T 64, fp16) against its float64 schedule: every output, gates included."""
    inputs = make_inputs("lstm", B, 64, 1, DH, dtype=torch.float16, device=runtime.device)
    cfg = v6.v6_config(DH, **kw)
    out, last, gates = st.split_forward_tiles(*inputs, cfg=cfg)
    want, want_last, want_gates = st.schedule_reference(*(x.cpu() for x in inputs), cfg=cfg)
    check.assert_close(out.cpu(), want, dtype=torch.float16, name="states_all")
    check.assert_close(last.cpu(), want_last, dtype=torch.float16, name="states_last")
    check.assert_close(gates.cpu(), want_gates, dtype=torch.float16, name="gates")
