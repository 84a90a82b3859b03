"""Version 6 of the split forward (Gluon: R in registers, h read once per program).

Gluon has no interpreter, so on a CPU the kernel is checked twice over: its arithmetic, program by program and chunk
by chunk (``schedule_reference``), against float64's LSTM; and its compiled form for sm_90 (registers, no spills,
no tensor-core operand read from shared memory in the step loop). The GPU tests run the kernel itself.
"""

import ast
import inspect
import json
import textwrap

import pytest
import torch

from gpulab import check, rnn, runtime
from gpulab.rnn.fused import gluon_tiles
from gpulab.rnn.fused import split_gluon as v6
from gpulab.rnn.fused.config import GluonConfig
from gpulab.rnn.fused.measure import sass


def _float64(inputs):
    return rnn.flashrnn(*(t.double() for t in inputs), function="lstm", backend="vanilla")


def _pre_activations(inputs, out):
    """pre_t = Wx_t + R h_{t-1} + b from the states a run produced: [B, T, 4, NH, DH] (float64)."""
    Wx, R, b, s0 = (t.double() for t in inputs)
    h = out[0].double()  # [B, T, NH, DH]
    prev = torch.cat((s0[0], h[:, :-1]), dim=1)  # h_{t-1}
    return Wx + torch.einsum("gnjk,btnk->btgnj", R, prev) + b[None, None]


@pytest.mark.parametrize("B,NH,DH,warps,block_u,block_b", [(1, 1, 64, 4, 8, 16), (17, 2, 96, 2, 16, 16),
                                                            (3, 1, 48, 1, 4, 16), (11, 1, 64, 2, 8, 8)])  # fmt: skip
def test_schedule_matches_float64(B, NH, DH, warps, block_u, block_b, make_inputs):
    """Every program's chunked product, summed and put through the cell, is the LSTM (odd batch, two heads, a K
    chunk of two pieces at 96 / 2 = 64 + 32 and 48 = 32 + 16, two tiles of 8 rows)."""
    inputs = make_inputs("lstm", B, 5, NH, DH, dtype=torch.float32, seed=B + DH)
    cfg = v6.v6_config(DH, block_u=block_u, block_b=block_b, warps=warps)
    out, last, gates = v6.schedule_reference(*inputs, cfg=cfg)
    ref = _float64(inputs)
    check.assert_close(out, ref[0], rtol=1e-12, name="states_all")
    check.assert_close(last, ref[1], rtol=1e-12, name="states_last")
    check.assert_close(gates, _pre_activations(inputs, ref[0]), rtol=1e-12, name="gates")


def test_schedule_sees_a_unit_taken_from_the_wrong_program(make_inputs):
    """The check above can fail: a schedule whose programs read R's rows one unit off gives other states."""
    inputs = make_inputs("lstm", 2, 3, 1, 64, dtype=torch.float32, seed=3)
    Wx, R, b, s0 = inputs
    wrong = torch.roll(R, shifts=1, dims=2)  # unit j's gate rows from unit j - 1
    out, _, _ = v6.schedule_reference(Wx, wrong, b, s0)
    with pytest.raises(AssertionError):
        check.assert_close(out, _float64(inputs)[0], rtol=1e-6, name="states_all")


@pytest.mark.parametrize("kc,want", [(192, (128, 64)), (96, (64, 32)), (256, (256, 0)), (16, (16, 0)),
                                     (224, None), (24, None)])  # fmt: skip
def test_k_pieces(kc, want):
    assert gluon_tiles.k_pieces(kc) == want


def test_register_estimate_at_one_head_of_768():
    """R's chunk is 96 registers per thread at 4 warps x 8 units (32 x 192 bf16 per warp), h's 48."""
    assert v6.register_estimate(768, v6.v6_config(768)) == {"r": 96, "h": 48, "partials": 16}


@pytest.mark.parametrize("dh,kw", [(768, {"block_u": 8, "warps": 4}), (768, {"block_u": 16, "warps": 8})])
def test_compiles_for_sm90_with_r_in_registers(dh, kw):
    """Compiled for the H100 (no GPU needed): under 255 registers, nothing spilled, 48 tensor-core instructions per
    step and warp (2 x 2 tiles of 16 x 8, 12 K steps), and the step's ldmatrix reads only the warp's own chunk of h
    (16-byte rows from L2 turned into the operand layout): 6 KB per warp at 8 units x 4 warps (v5's loop reads R and
    all of h through it: 144 KB per step and program)."""
    argv = ["v6", "--dh", str(dh), "--warps", str(kw["warps"]), "--set", f"BLOCK_U={kw['block_u']}", "--save-gates"]
    done = sass.run_offline(argv, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    row = json.loads(done.stdout.strip().splitlines()[-1])
    # each warp: the whole [4 BU, BLOCK_B] tile of its K chunk, as m16n8k16 instructions
    assert row["mma"] == (4 * kw["block_u"] // 16) * (row["block_b"] // 8) * (dh // kw["warps"] // 16) == 48
    assert row["ldsm_bytes"] == dh // kw["warps"] * row["block_b"] * 2 and row["spills"] == 0
    assert 0 < row["registers"] <= 255
    assert row["mufu"] == 5 * kw["block_u"] * row["block_b"] // (32 * kw["warps"])  # 5 per element: 4 gates, tanh c


def launch_names(host, kernel, constexprs):
    """The host names every leading kernel argument, once, in one ``in_order(kernel, ...)`` call that puts them in
    the kernel's order for the direct launch (a positional launch in another order than the kernel's parameters
    compiles and runs, on the wrong tensors); the constexprs name the rest; no launch by subscript is left."""
    src = textwrap.dedent(inspect.getsource(host))
    calls = [c for c in ast.walk(ast.parse(src)) if isinstance(c, ast.Call)]
    assert not [c for c in calls if isinstance(c.func, ast.Subscript)], (
        "launched through keyed_launch, not kernel[grid]"
    )
    ordered = [c for c in calls if isinstance(c.func, ast.Name) and c.func.id == "in_order"]
    assert len(ordered) == 1 and len(ordered[0].args) == 1, "one in_order(kernel, name=value, ...) call"
    assert ordered[0].args[0].id == kernel.__name__
    names = [k.arg for k in ordered[0].keywords]
    assert None not in names and len(set(names)) == len(names)
    assert not set(names) & set(constexprs) and set(names) | set(constexprs) == set(kernel.arg_names)


def test_in_order_puts_named_arguments_in_the_kernels_order():
    from gpulab.launch import in_order

    args = in_order(
        v6.split_forward_v6_kernel, **{n: i for i, n in enumerate(v6.split_forward_v6_kernel.arg_names[:14])}
    )
    assert args == tuple(range(14))
    with pytest.raises(ValueError, match="first 2 parameters are"):
        in_order(v6.split_forward_v6_kernel, wx_ptr=0, b_ptr=1)


def test_host_passes_every_kernel_argument_by_name():
    launch_names(
        v6.split_forward_v6,
        v6.split_forward_v6_kernel,
        v6._constexprs(768, v6.v6_config(768), True, True, "coalesced", False),
    )


def test_config_refuses_tiles_past_the_budgets():
    with pytest.raises(ValueError, match="registers per thread"):
        v6.v6_config(256, block_u=32, block_b=64, warps=8)


def test_refuses_the_cpu(make_inputs):
    if not runtime.INTERPRET:
        pytest.skip("the CPU refusal")
    inputs = make_inputs("lstm", 2, 3, 1, 64, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="schedule_reference"):
        v6.split_forward_v6(*inputs)


@pytest.mark.gpu
@pytest.mark.parametrize("B,DH,kw", [(16, 768, {}), (16, 768, {"block_u": 16, "warps": 8}), (1, 256, {}),
                                     (17, 256, {"warps": 2}), (3, 64, {"block_u": 4, "warps": 1}),
                                     (16, 256, {"block_u": 16, "warps": 8}),
                                     (32, 768, {"block_u": 16, "warps": 8, "block_b": 32}),
                                     (23, 768, {"block_u": 16, "warps": 8, "block_b": 32}),
                                     (32, 768, {"block_u": 16, "warps": 8}),
                                     (29, 768, {"block_u": 16, "warps": 8}),
                                     (16, 768, {"block_u": 16, "warps": 8, "block_b": 8}),
                                     (13, 768, {"block_u": 16, "warps": 8, "block_b": 8})])  # fmt: skip
@pytest.mark.parametrize("exchange", v6.EXCHANGES)
def test_v6_on_gpu(B, DH, kw, exchange, make_inputs):
    """The kernel at full width (T = 64, bf16) against float64, gates too; launched again (the barrier's counter
    carries over) it gives the same bits; the split forward of version 5 agrees within bf16's tolerance."""
    from gpulab.rnn.fused import split

    inputs = make_inputs("lstm", B, 64, 1, DH, dtype=torch.bfloat16, device=runtime.device)
    cfg = v6.v6_config(DH, **kw)
    out, last, gates = v6.split_forward_v6(*inputs, cfg=cfg, exchange=exchange)
    ref = _float64(inputs)
    check.assert_close_drifting(out, ref[0], name="states_all")
    check.assert_close_drifting(last, ref[1], name="states_last")
    check.assert_close(gates, _pre_activations(inputs, out), dtype=torch.bfloat16, name="gates")
    for _ in range(20):
        again, _, _ = v6.split_forward_v6(*inputs, cfg=cfg, exchange=exchange)
        assert torch.equal(again, out)
    v5, _, _ = split.split_rnn_forward(*inputs, function="lstm", save_gates=False)
    check.assert_close_drifting(out, v5.double(), name="v6 vs v5")


@pytest.mark.gpu
def test_tagged_exchange_past_the_tags_wrap(make_inputs):
    """Past 65535 steps the 16-bit tags start over (step t's tag is t % 65535 + 1): the tagged exchange still gives
    the counter's bits, step for step."""
    inputs = make_inputs("lstm", 3, 65600, 1, 64, dtype=torch.bfloat16, device=runtime.device, seed=5)
    cfg = v6.v6_config(64, block_u=4, block_b=8, warps=1)
    tagged = v6.split_forward_v6(*inputs, cfg=cfg, exchange="tagged", save_gates=False)[0]
    assert torch.equal(tagged, v6.split_forward_v6(*inputs, cfg=cfg, exchange="counter", save_gates=False)[0])


def test_both_pieces_of_h_are_loaded_before_the_change_of_layout(tmp_path, gluon_loop_sass):
    """h_{t-1}'s two K pieces (64 + 32 per warp) leave for L2 together: no CTA barrier between the step's 16-byte
    loads of h (converting the first piece before loading the second made the second trip wait for the first)."""
    lines = gluon_loop_sass("v6", tmp_path, "--save-gates")
    h = [i for i, op in enumerate(lines) if op.lstrip("@!P0123456789 ").startswith("LDG.E.128")]
    assert len(h) >= 2, "the step's loads of h"
    assert not any("BAR.SYNC" in op for op in lines[h[0] : h[-1]]), lines[h[0] : h[-1] + 1]


def test_late_inputs_only_in_8_row_tiles(tmp_path, gluon_loop_sass):
    """The measured choice (``notes/rnn-split.md``): at 8 batch rows the forward issues the next step's input
    projections after its arrival at the barrier (its release then waits for no load); at 16 rows before the cell.
    In the 8-row tile's SASS the step's arrival (REDG) comes before the input loads, and no input load comes between
    the step's start and the arrival."""
    shipped = GluonConfig()
    assert shipped.late_inputs_for(8) and shipped.late_inputs_for(4) and not shipped.late_inputs_for(16)
    assert GluonConfig(late_inputs=True).late_inputs_for(16) and not GluonConfig(late_inputs=False).late_inputs_for(8)
    lines = gluon_loop_sass("v6", tmp_path, "--save-gates")
    arrive = next(i for i, op in enumerate(lines) if "REDG.E.ADD" in op)
    loads = [i for i, op in enumerate(lines) if "LDG.E.U16 " in op or "LDG.E.64 " in op or "LDG.E " in op]
    assert loads and all(i > arrive for i in loads), [lines[i] for i in loads]


@pytest.mark.gpu
def test_v6_and_b4_relaunch_directly_with_the_same_bits(make_inputs):
    """After the first call of a problem, version 6's forward and b4 go straight to the compiled cooperative kernel
    (gpulab.launch, no JITFunction.run): the direct launches are counted, and their results equal the first call's
    bit for bit (the arguments reach the kernel in its order)."""
    from gpulab import launch
    from gpulab.rnn.fused import split_gluon_backward as b4

    inputs = make_inputs("lstm", 5, 16, 1, 256, dtype=torch.bfloat16, device=runtime.device)
    first = v6.split_forward_v6(*inputs)
    out, _, gates = first
    d_out = torch.randn_like(out)
    back = b4.split_backward_b4(d_out, gates, out, inputs[3], inputs[1])
    before = launch.launch_counts()["direct"]
    again = v6.split_forward_v6(*inputs)
    back_again = b4.split_backward_b4(d_out, gates, out, inputs[3], inputs[1])
    assert launch.launch_counts()["direct"] == before + 2, "a repeated v6/b4 launch went through JITFunction.run"
    for a, b in zip(first + back, again + back_again):
        assert torch.equal(a, b)
