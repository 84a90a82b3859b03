"""Lesson 4's public callables refuse bad input with a TypeError or ValueError that names the argument.

One table: (id, call, expected exception, a word the message must contain). ``call`` takes a namespace of small
valid inputs (q, k, v, do of shape [1, 2, 5, 16] / [1, 2, 7, 16]) and changes one thing."""

import math
import types

import pytest
import torch

from gpulab import attention as A
from gpulab import runtime
from gpulab.attention.measure import benchmark as ab
from gpulab.attention.measure import report as ar
from gpulab.course import grading_attention

CFG = A.AttentionConfig(16, 16, 16, 4, 1)


def _zeros(*shape, dtype=torch.float32):
    return torch.zeros(*shape, dtype=dtype, device=runtime.device)


def _ones(*shape, dtype=torch.float32):
    return torch.ones(*shape, dtype=dtype, device=runtime.device)


CASES = [
    # flash_attention: scale, flags
    ("flash-scale-str", lambda x: A.flash_attention(x.q, x.k, x.v, scale="big"), TypeError, "scale"),
    ("flash-scale-nan", lambda x: A.flash_attention(x.q, x.k, x.v, scale=float("nan")), ValueError, "scale"),
    ("flash-scale-inf", lambda x: A.flash_attention(x.q, x.k, x.v, scale=float("inf")), ValueError, "finite"),
    (
        "flash-scale-minus-inf",
        lambda x: A.flash_attention(x.q, x.k, x.v, scale=-math.inf),
        ValueError,
        "SDPA returns NaN",
    ),
    (
        "forward-v2-scale-negative",
        lambda x: A.attention_forward(x.q.half(), x.k.half(), x.v.half(), scale=-1.0, version=2),
        ValueError,
        "scales >= 0",
    ),  # fmt: skip
    ("flash-causal-str", lambda x: A.flash_attention(x.q, x.k, x.v, is_causal="no"), TypeError, "is_causal"),
    ("flash-causal-int", lambda x: A.flash_attention(x.q, x.k, x.v, is_causal=1), TypeError, "is_causal"),
    ("flash-tf32-str", lambda x: A.flash_attention(x.q, x.k, x.v, allow_tf32="yes"), TypeError, "allow_tf32"),
    (
        "flash-tf32-fp16",
        lambda x: A.flash_attention(x.q.half(), x.k.half(), x.v.half(), allow_tf32=True),
        ValueError,
        "allow_tf32",
    ),  # fmt: skip
    ("flash-autotune-str", lambda x: A.flash_attention(x.q, x.k, x.v, autotune="yes"), ValueError, "autotune"),
    # flash_attention: tensors, shapes, dtypes, devices
    ("flash-q-list", lambda x: A.flash_attention(x.q.tolist(), x.k, x.v), TypeError, "q"),
    ("flash-1d", lambda x: A.flash_attention(x.q[0, 0, 0], x.k[0, 0, 0], x.v[0, 0, 0]), ValueError, "4-dimensional"),
    ("flash-dims-differ", lambda x: A.flash_attention(x.q[0], x.k, x.v), ValueError, "the same leading batch dims"),
    (
        "flash-leading-differ",
        lambda x: A.flash_attention(x.q[None], x.k[None].expand(2, -1, -1, -1, -1), x.v[None]),
        ValueError,
        r"k has leading dims \(2, 1\)",
    ),  # fmt: skip
    ("flash-attn-mask", lambda x: A.flash_attention(x.q, x.k, x.v, _ones(4, 4) > 0), ValueError, "no attention mask"),
    ("flash-mask-as-causal", lambda x: A.flash_attention(x.q, x.k, x.v, True), TypeError, "pass is_causal=True"),
    ("flash-dropout", lambda x: A.flash_attention(x.q, x.k, x.v, dropout_p=0.1), ValueError, "no attention dropout"),
    ("flash-dropout-str", lambda x: A.flash_attention(x.q, x.k, x.v, dropout_p="0"), TypeError, "dropout_p"),
    (
        "flash-heads-differ",
        lambda x: A.flash_attention(x.q, x.k[:, :1], x.v[:, :1]),
        ValueError,
        "enable_gqa=False they must be equal",
    ),  # fmt: skip
    ("flash-kv-differ", lambda x: A.flash_attention(x.q, x.k, x.v[:, :, :3]), ValueError, "same shape"),
    ("flash-head-dim-differ", lambda x: A.flash_attention(x.q, x.k[..., :8], x.v[..., :8]), ValueError, "head_dim"),
    (
        "flash-head-dim-264",
        lambda x: A.flash_attention(*(_zeros(1, 1, 4, 264),) * 3),
        ValueError,
        "head dims 1 to 256",
    ),  # fmt: skip
    ("flash-dtype-differ", lambda x: A.flash_attention(x.q, x.k.half(), x.v), ValueError, "share one dtype"),
    ("flash-float64", lambda x: A.flash_attention(x.q.double(), x.k.double(), x.v.double()), ValueError, "q"),
    (
        "flash-float64-fix",
        lambda x: A.flash_attention(x.q.double(), x.k.double(), x.v.double()),
        ValueError,
        r"`q.float\(\)`, or for a float64 reference call gpulab.attention.attention_reference",
    ),  # fmt: skip
    ("flash-scale-over-fp32", lambda x: A.flash_attention(x.q, x.k, x.v, scale=1e39), ValueError, "float32's largest"),
    ("flash-scale-under-fp32", lambda x: A.flash_attention(x.q, x.k, x.v, scale=-1e39), ValueError, "scale=-1e"),
    ("flash-int", lambda x: A.flash_attention(*(_ones(1, 1, 4, 16, dtype=torch.int32),) * 3), ValueError, "q"),
    ("flash-meta", lambda x: A.flash_attention(x.q.to("meta"), x.k, x.v), ValueError, "is on"),
    # the forward and backward wrappers
    ("forward-config-str", lambda x: A.attention_forward(x.q, x.k, x.v, config="fast"), TypeError, "config"),
    (
        "forward-config-small",
        lambda x: A.attention_forward(*(_zeros(1, 1, 4, 24),) * 3, config=CFG),
        ValueError,
        "block_d",
    ),  # fmt: skip
    ("forward-causal-str", lambda x: A.attention_forward(x.q, x.k, x.v, is_causal="yes"), TypeError, "is_causal"),
    (
        "backward-lse-shape",
        lambda x: A.attention_backward(x.do, x.q, x.k, x.v, x.q, _zeros(1, 2, 4)),
        ValueError,
        "lse",
    ),  # fmt: skip
    (
        "backward-configs-key",
        lambda x: A.attention_backward(x.do, x.q, x.k, x.v, x.q, _zeros(1, 2, 5), configs={"fwd": CFG}),
        TypeError,
        "configs",
    ),  # fmt: skip
    (
        "backward-do-shape",
        lambda x: A.attention_backward(x.do[:, :1], x.q, x.k, x.v, x.q, _zeros(1, 2, 5)),
        ValueError,
        "do",
    ),  # fmt: skip
    (
        "backward-do-dtype",
        lambda x: A.attention_backward(x.do.half(), x.q, x.k, x.v, x.q, _zeros(1, 2, 5)),
        ValueError,
        "do is torch.float16 but o is torch.float32; o and do must share one dtype",
    ),  # fmt: skip
    # references
    ("naive-causal-str", lambda x: A.naive_attention(x.q, x.k, x.v, is_causal="no"), TypeError, "is_causal"),
    ("naive-scale-str", lambda x: A.naive_attention(x.q, x.k, x.v, scale="big"), TypeError, "scale"),
    ("naive-q-list", lambda x: A.naive_attention([1.0], x.k, x.v), TypeError, "q"),
    ("naive-head-dim-differ", lambda x: A.naive_attention(x.q, x.k[..., :8], x.v), ValueError, "head_dim"),
    ("tiled-block-q-0", lambda x: A.tiled_attention(x.q, x.k, x.v, block_q=0), ValueError, "block_q"),
    ("tiled-block-k-float", lambda x: A.tiled_attention(x.q, x.k, x.v, block_k=2.5), TypeError, "block_k"),
    ("reference-do-shape", lambda x: A.attention_reference(x.q, x.k, x.v, do=x.k), ValueError, "do"),
    # references: leading dims of q, k, v equal (nothing broadcast), one dtype, v required, q a tensor
    ("naive-heads-broadcast", lambda x: A.naive_attention(x.q[:, :1], x.k, x.v), ValueError, "nothing is broadcast"),
    ("tiled-heads-differ", lambda x: A.tiled_attention(x.q, x.k[:, :1], x.v[:, :1]), ValueError, "but k has"),
    ("reference-v-heads-differ", lambda x: A.attention_reference(x.q, x.k, x.v[:, :1]), ValueError, "but v has"),
    ("lse-reference-heads-differ", lambda x: A.logsumexp_reference(x.q[:, :1], x.k), ValueError, "leading"),
    ("naive-dtype-differ", lambda x: A.naive_attention(x.q, x.k.half(), x.v), ValueError, "share one dtype"),
    ("tiled-dtype-differ", lambda x: A.tiled_attention(x.q, x.k, x.v.double()), ValueError, "v is torch.float64"),
    ("reference-dtype-differ", lambda x: A.attention_reference(x.q, x.k.double(), x.v), ValueError, r"k.to\(q.dtype\)"),
    ("naive-device-differ", lambda x: A.naive_attention(x.q, x.k.to("meta"), x.v), ValueError, "one device"),
    ("naive-v-none", lambda x: A.naive_attention(x.q, x.k, None), TypeError, "v must be a torch.Tensor"),
    ("tiled-v-none", lambda x: A.tiled_attention(x.q, x.k, None), TypeError, "v must be a torch.Tensor"),
    ("reference-v-none", lambda x: A.attention_reference(x.q, x.k, None), TypeError, "v must be a torch.Tensor"),
    ("reference-q-none", lambda x: A.attention_reference(None, x.k, x.v), TypeError, "q must be a torch.Tensor"),
    ("lse-reference-k-none", lambda x: A.logsumexp_reference(x.q, None), TypeError, "k must be a torch.Tensor"),
    ("lse-reference-causal-none", lambda x: A.logsumexp_reference(x.q, x.k, is_causal=None), TypeError, "is_causal"),
    ("causal-mask-negative", lambda x: A.causal_mask(-1, 2), ValueError, "seq_q"),
    ("causal-mask-float", lambda x: A.causal_mask(2, 2.0), TypeError, "seq_k"),
    ("default-scale-head-dim-0", lambda x: A.default_scale(0), ValueError, "head_dim"),
    ("default-scale-str", lambda x: A.default_scale(16, "x"), TypeError, "scale"),
    # softmax
    ("softmax-naive-list", lambda x: A.softmax_naive([1.0, 2.0]), TypeError, "x"),
    ("softmax-safe-0d", lambda x: A.softmax_safe(_zeros(())), ValueError, "x"),
    ("softmax-online-block-0", lambda x: A.softmax_online(x.q, block=0), ValueError, "block"),
    ("softmax-online-block-float", lambda x: A.softmax_online(x.q, block=2.0), TypeError, "block"),
    ("online-softmax-block-3", lambda x: A.online_softmax(x.q, block=3), ValueError, "power of two"),
    ("online-softmax-block-0", lambda x: A.online_softmax(x.q, block=0), ValueError, "block"),
    ("online-softmax-int", lambda x: A.online_softmax(_ones(3, dtype=torch.int32)), ValueError, "x"),
    ("online-softmax-0d", lambda x: A.online_softmax(_zeros(())), ValueError, "x"),
    # configs and autotuning
    ("config-kind", lambda x: A.attention_config("fwd", 64), ValueError, "kind"),
    ("config-head-dim-257", lambda x: A.attention_config("forward", 257), ValueError, "head_dim"),
    ("config-head-dim-float", lambda x: A.attention_config("forward", 64.0), TypeError, "head_dim"),
    ("config-seq-0", lambda x: A.attention_config("forward", 64, seq_q=0), ValueError, "seq_q"),
    (
        "config-interpreter-str",
        lambda x: A.attention_config("forward", 64, interpreter="no"),
        TypeError,
        "interpreter",
    ),  # fmt: skip
    ("config-dtype", lambda x: A.attention_config("forward", 64, dtype="int8"), ValueError, "dtype"),
    ("config-record-tile", lambda x: A.AttentionConfig(24, 16, 16, 4, 1), ValueError, "block_m"),
    ("config-record-stages", lambda x: A.AttentionConfig(16, 16, 16, 4, 0), ValueError, "num_stages"),
    ("smem-kind", lambda x: A.smem_estimate("both", 16, 16, 16, 2, 1), ValueError, "kind"),
    ("smem-block-0", lambda x: A.smem_estimate("dq", 0, 16, 16, 2, 1), ValueError, "block_m"),
    ("candidates-kind", lambda x: A.candidates("fwd", 64), ValueError, "kind"),
    ("autotune-run", lambda x: A.autotune(("k",), [CFG], run=None), TypeError, "run"),
    ("autotune-empty", lambda x: A.autotune(("k2",), [], run=print), ValueError, "configs"),
    ("autotune-key", lambda x: A.autotune(["k"], [CFG], run=print), TypeError, "key"),
    ("autotune-timer", lambda x: A.autotune(("k3",), [CFG], run=print, timer=3), TypeError, "timer"),
    # the schedule and the benchmark
    ("schedule-block-0", lambda x: A.block_schedule(10, 10, 0, 16), ValueError, "block_m"),
    ("schedule-causal-str", lambda x: A.block_schedule(10, 10, 16, 16, is_causal="yes"), TypeError, "is_causal"),
    ("grid-head-dim", lambda x: ab.grid(head_dims=(48.0,)), TypeError, "head_dims"),
    ("grid-seq-0", lambda x: ab.grid(seqs=(0,)), ValueError, "seqs"),
    ("grid-causal-int", lambda x: ab.grid(causal=(0,)), TypeError, "causal"),
    ("benchmark-progress", lambda x: ab.benchmark(progress=3), TypeError, "progress"),
    ("benchmark-memory-seqs", lambda x: ab.benchmark(problems=[], memory_seqs=(-1,)), ValueError, "memory_seqs"),
    # graders of exercise 4
    ("grade-update-none", lambda x: grading_attention.grade_online_update(None), TypeError, "update"),
    ("grade-update-cases", lambda x: grading_attention.grade_online_update(print, cases=0), ValueError, "cases"),
    ("grade-kernel-fn", lambda x: grading_attention.grade_forward_kernel(print), TypeError, "kernel"),
    ("grade-kernel-str", lambda x: grading_attention.grade_forward_kernel("kernel"), TypeError, "kernel is a str"),
    # the benchmark's tables and figures read a non-empty list of records
    ("add_ratios-str", lambda x: ab.add_ratios("results"), TypeError, "results must be a list"),
    ("summary_table-int", lambda x: ar.summary_table(5), TypeError, "results must be a list"),
    ("summary_table-empty", lambda x: ar.summary_table([]), ValueError, "results is empty"),
    ("memory_table-empty", lambda x: ar.memory_table([]), ValueError, "results is empty"),
    ("memory_table-items", lambda x: ar.memory_table([{"kind": "memory"}]), TypeError, r"results\[0\] is a dict"),
    ("targets-empty", lambda x: ar.targets([]), ValueError, "results is empty"),
    ("plot_throughput-empty", lambda x: ar.plot_throughput([]), ValueError, "results is empty"),
    ("plot_memory-items", lambda x: ar.plot_memory([None]), TypeError, r"results\[0\] is a NoneType"),
    ("plot-dict", lambda x: ar.plot({}), TypeError, "results must be a list"),
]


@pytest.fixture
def inputs(attention_inputs):
    q, k, v, do = attention_inputs(1, 2, 5, 7, 16)
    return types.SimpleNamespace(q=q, k=k, v=v, do=do)


@pytest.mark.parametrize("call, error, word", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_by_name(inputs, call, error, word):
    with pytest.raises(error, match=word):
        call(inputs)


@pytest.mark.skipif(not runtime.INTERPRET, reason="bf16 is refused only by the CPU interpreter")
def test_bf16_is_refused_in_the_interpreter(inputs):
    with pytest.raises(ValueError, match="bfloat16"):
        A.flash_attention(inputs.q.bfloat16(), inputs.k.bfloat16(), inputs.v.bfloat16())


@pytest.mark.skipif(not runtime.INTERPRET, reason="bf16 is refused only by the CPU interpreter")
def test_unsupported_dtype_messages_list_what_runs_here_and_the_fix(inputs):
    with pytest.raises(ValueError) as e:
        A.flash_attention(inputs.q.double(), inputs.k.double(), inputs.v.double())
    assert "float32, float16 here" in str(e.value) and "bfloat16" not in str(e.value)
    with pytest.raises(ValueError) as e:  # the shared check, gpulab.hardware.require_dtype
        A.online_softmax(inputs.q.double())
    assert "bfloat16" not in str(e.value) and "`x.float()`" in str(e.value)


def test_scales_within_float32_range_are_kept(inputs):
    assert A.check_inputs(inputs.q, inputs.k, inputs.v, scale=-3e38) == -3e38


@pytest.mark.skipif(not runtime.INTERPRET, reason="bf16 is refused only by the CPU interpreter")
def test_cpu_autocast_to_bf16_is_refused_naming_autocast(inputs):
    # CPU autocast's default dtype is bf16: q, k, v are cast to it as SDPA's are, and the error says autocast did it
    with (
        torch.autocast("cpu"),
        pytest.raises(
            ValueError,
            match=r"torch.autocast\('cpu', dtype=torch.bfloat16\) is on.*"
            r"dtype=torch.float16\), or run this call outside autocast",
        ),
    ):
        A.flash_attention(inputs.q, inputs.k, inputs.v)


def test_dropout_p_zero_of_numpy_is_taken_as_sdpa_takes_it(inputs):
    np = pytest.importorskip("numpy")
    o = A.flash_attention(inputs.q, inputs.k, inputs.v, dropout_p=np.float32(0.0))  # a TypeError before
    assert torch.equal(o, A.flash_attention(inputs.q, inputs.k, inputs.v))
    with pytest.raises(ValueError, match="no attention dropout"):
        A.flash_attention(inputs.q, inputs.k, inputs.v, dropout_p=np.float64(0.1))
