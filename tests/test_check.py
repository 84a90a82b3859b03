"""gpulab.check: the element-wise metric, NaN/inf/poison handling, messages, tolerances, random inputs."""

import math
import re

import numpy
import pytest
import torch

from gpulab import check


def _ref(*shape):
    return check.random_tensor(*shape, dtype=torch.float64)


# ----------------------------------------------------------------------------------------------------------------
# passing cases


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_rounding_differences_pass(dtype):
    ref = _ref(1001)
    out = ref.to(dtype)  # rounded once to the dtype: what a correct kernel produces
    rel = check.assert_close(out, ref)
    assert 0 < rel < check.tolerance(dtype)


def test_tiny_fp32_differences_pass():
    ref = _ref(37, 29)
    out = (ref * (1 + 1e-7)).float()
    assert check.assert_close(out, ref) < 1e-6


def test_near_zero_reference_elements_do_not_fail():
    """|out - ref| is compared to tol * (|ref| + rms(ref)): an element that should be ~0 gets an absolute margin."""
    ref = _ref(2049)
    ref[[0, 100, 2048]] = 0.0
    ref[7] = 1e-12
    out = ref.clone()
    rms = ref.pow(2).mean().sqrt().item()
    out[[0, 100, 2048, 7]] = 3e-6 * rms  # hopeless relative to ref_i, fine relative to rms(ref)
    check.assert_close(out, ref, dtype=torch.float32)
    out[100] = 3e-5 * rms  # but 3x past the fp32 tolerance still fails
    with pytest.raises(AssertionError, match=r"index \(100\)"):
        check.assert_close(out, ref, dtype=torch.float32)


def test_returns_normwise_relative_error():
    ref = _ref(500)
    out = ref * (1 + 1e-6)
    assert check.assert_close(out, ref, dtype=torch.float32) == pytest.approx(1e-6, rel=1e-3)
    assert check.relative_error(out, ref) == pytest.approx(1e-6, rel=1e-3)


def test_empty_tensors_pass():
    assert check.assert_close(torch.empty(0, 3), torch.empty(0, 3, dtype=torch.float64)) == 0.0


def test_tuple_outputs():
    a, b = _ref(5, 3), _ref(11)
    check.assert_close((a.float(), b.float()), (a, b))
    check.assert_close([a.float(), b.float()], [a, b])
    bad = b.float().clone()
    bad[4] += 1.0
    with pytest.raises(AssertionError) as e:
        check.assert_close((a.float(), bad), (a, b), name="lstm")
    assert "lstm[1]" in str(e.value) and "index (4)" in str(e.value)
    with pytest.raises(AssertionError, match="expected 2 outputs"):
        check.assert_close((a.float(),), (a, b))
    with pytest.raises(AssertionError, match="expected 1 outputs"):
        check.assert_close((a.float(), b.float()), a)


# ----------------------------------------------------------------------------------------------------------------
# failing cases


def test_single_wrong_element_in_big_tensor_fails():
    n = 1_000_003
    ref = _ref(n)
    i = 654_321
    ref[i] = 2.0
    out = ref.float()
    out[i] = 2.004  # 0.2 % off in one element of a million
    # the norm-wise error would hide it ...
    assert check.relative_error(out, ref) < check.tolerance(torch.float32)
    # ... the element-wise check does not
    with pytest.raises(AssertionError) as e:
        check.assert_close(out, ref)
    msg = str(e.value)
    assert f"1 of {n} elements" in msg
    assert f"index ({i})" in msg
    assert "got 2.004" in msg and "expected 2" in msg


def test_message_has_index_values_and_count():
    ref = _ref(7, 13)
    ref[3, 5], ref[6, 12] = 1.5, -4.25
    out = ref.float()
    out[3, 5] = 2.5
    out[6, 12] = -4.5
    with pytest.raises(AssertionError) as e:
        check.assert_close(out, ref, name="y", context="seed 7")
    msg = str(e.value)
    assert msg.startswith("y (seed 7) does not match")
    assert "2 of 91 elements differ" in msg
    assert "index (3, 5)" in msg  # the worst one: 1.0 off vs 0.25 off
    assert "got 2.5, expected 1.5" in msg
    assert "1e-05 tolerance" in msg


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("rtol", [None, 1e6])
def test_nonfinite_output_fails(bad, rtol):
    ref = _ref(4, 9)
    out = ref.float()
    out[2, 3] = bad
    with pytest.raises(AssertionError) as e:
        check.assert_close(out, ref, rtol=rtol)
    msg = str(e.value)
    assert "1 of 36 elements are NaN or inf" in msg
    assert "index (2, 3)" in msg
    assert f"got {bad}" in msg
    assert f"expected {ref[2, 3].item():.6g}" in msg


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nonfinite_fails_even_where_the_reference_has_it(bad):
    ref = _ref(50)
    ref[10] = bad
    out = ref.float()
    with pytest.raises(AssertionError, match="NaN or inf"):
        check.assert_close(out, ref)
    assert check.assert_close(out, ref, allow_nonfinite=True) is not None  # same place, same value: allowed


def test_allow_nonfinite_only_where_the_reference_matches():
    ref = _ref(50)
    ref[10] = math.nan
    ref[20] = math.inf
    out = ref.float()
    out[11] = math.nan  # NaN where the reference is finite
    with pytest.raises(AssertionError, match=r"index \(11\)"):
        check.assert_close(out, ref, allow_nonfinite=True)
    out = ref.float()
    out[20] = -math.inf  # wrong sign of infinity
    with pytest.raises(AssertionError, match=r"index \(20\)"):
        check.assert_close(out, ref, allow_nonfinite=True)


@pytest.mark.parametrize("ref_value", [math.inf, math.nan])
@pytest.mark.parametrize("allow_nonfinite", [False, True])
def test_finite_output_where_reference_is_nonfinite_fails(ref_value, allow_nonfinite):
    ref = _ref(20)
    ref[3] = ref_value
    out = ref.float()
    out[3] = 1.0  # the kernel was supposed to overflow (or produce NaN) here and did not
    with pytest.raises(AssertionError, match=r"index \(3\)"):
        check.assert_close(out, ref, allow_nonfinite=allow_nonfinite)


def test_shape_mismatch_fails():
    ref = _ref(4, 6)
    with pytest.raises(AssertionError) as e:
        check.assert_close(ref.float().reshape(6, 4), ref, name="scores")
    assert "scores" in str(e.value) and "(6, 4)" in str(e.value) and "(4, 6)" in str(e.value)
    with pytest.raises(AssertionError, match="shape"):
        check.assert_close(ref.float()[:3], ref)
    with pytest.raises(AssertionError, match="shape"):
        check.assert_close(ref.float().reshape(-1), ref)  # same numbers, flattened: still wrong


def test_non_tensor_output_fails():
    with pytest.raises(AssertionError, match="expected a torch.Tensor, got ndarray"):
        check.assert_close(numpy.array([1.0, 2.0]), torch.tensor([1.0, 2.0]))


@pytest.mark.parametrize("missed", [0, 500, 1022])
def test_poisoned_output_not_fully_written_fails(missed):
    ref = _ref(1023)
    out = check.poisoned(1023)
    written = torch.ones(1023, dtype=torch.bool)
    written[missed] = False
    out[written] = ref[written].float()  # a "kernel" that forgot one element
    with pytest.raises(AssertionError) as e:
        check.assert_close(out, ref)
    msg = str(e.value)
    assert "1 of 1023 elements are NaN or inf" in msg and f"index ({missed})" in msg
    assert "poisoned" in msg and "masks" in msg


# ----------------------------------------------------------------------------------------------------------------
# tolerances


def test_tolerances_are_ordered():
    t = check.tolerance
    assert t(torch.float64) < t(torch.float32) < t("tf32") <= t(torch.float16) < t(torch.bfloat16)
    assert t("float32") == t("fp32") == t(torch.float32)
    assert t("fp16") == t(torch.float16)
    assert t("bf16") == t(torch.bfloat16)


@pytest.mark.parametrize("bad", ["fp8", "int32", torch.int32, "half-ish"])
def test_tolerance_unknown_dtype(bad):
    with pytest.raises(ValueError, match="no tolerance"):
        check.tolerance(bad)


def test_dtype_argument_picks_the_tolerance():
    ref = _ref(300)
    out = ref.float() * (1 + 1e-3)  # fp32 result with a tf32-sized error
    with pytest.raises(AssertionError):
        check.assert_close(out, ref)  # judged as fp32
    check.assert_close(out, ref, dtype="tf32")
    check.assert_close(out, ref, rtol=2e-3)
    with pytest.raises(AssertionError):
        check.assert_close(out, ref, rtol=5e-4)


def test_bf16_sized_error_fails_as_fp16():
    ref = _ref(4096)
    check.assert_close(ref.to(torch.bfloat16), ref)
    out = (ref * 1.015).float()  # 1.5 % off everywhere: within bf16's tolerance, not fp16's
    check.assert_close(out, ref, dtype=torch.bfloat16)
    with pytest.raises(AssertionError):
        check.assert_close(out, ref, dtype=torch.float16)


# ----------------------------------------------------------------------------------------------------------------
# integer outputs


def test_integer_outputs_are_compared_exactly():
    ref = torch.arange(-5, 12, dtype=torch.int64)
    check.assert_close(ref.clone(), ref)
    out = check.poisoned(17, dtype=torch.int64)
    out[:16] = ref[:16]
    with pytest.raises(AssertionError, match=r"index \(16\)"):
        check.assert_close(out, ref)


# ----------------------------------------------------------------------------------------------------------------
# poison and random inputs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_poisoned_floats_are_all_nan(dtype):
    x = check.poisoned(3, 5, dtype=dtype)
    assert x.shape == (3, 5) and x.dtype == dtype and x.device.type == "cpu"
    assert torch.isnan(x).all()
    assert check.poisoned((2, 7), dtype=dtype).shape == (2, 7)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64])
def test_poisoned_ints_are_the_minimum(dtype):
    x = check.poisoned(17, dtype=dtype)
    assert x.dtype == dtype
    assert (x == torch.iinfo(dtype).min).all()


def test_poison_in_place():
    x = torch.ones(4)
    assert check.poison_(x) is x and torch.isnan(x).all()
    b = torch.zeros(3, dtype=torch.bool)
    assert check.poison_(b).all()


def test_random_tensor_is_fresh_each_call():
    a, b = check.random_tensor(1000), check.random_tensor(1000)
    assert not torch.equal(a, b)
    assert a.dtype == torch.float32 and a.device.type == "cpu" and a.shape == (1000,)


def test_random_tensor_same_seed_same_values():
    a = check.random_tensor(3, 7, seed=1234)
    b = check.random_tensor((3, 7), seed=1234)
    c = check.random_tensor(3, 7, seed=1235)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert check.random_tensor(5, seed=0).abs().sum() > 0  # seed 0 is a seed, not "no seed"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("distribution", ["normal", "uniform"])
def test_random_tensor_is_never_zeros(dtype, distribution):
    x = check.random_tensor(1, 17, dtype=dtype, distribution=distribution)
    assert x.dtype == dtype and x.shape == (1, 17)
    assert (x != 0).sum() >= 15  # a random draw, not an empty/zero buffer
    assert torch.isfinite(x).all()
    assert x.unique().numel() > 10


def test_random_tensor_scale_and_uniform_range():
    x = check.random_tensor(20000, distribution="uniform", scale=3.0, dtype=torch.float64)
    assert x.min() >= -3.0 and x.max() < 3.0
    assert x.max() > 2.9 and x.min() < -2.9
    y = check.random_tensor(20000, scale=0.01, dtype=torch.float64)
    assert 0.009 < y.std().item() < 0.011


def test_random_tensor_unknown_distribution():
    with pytest.raises(ValueError, match="distribution='gamma'"):
        check.random_tensor(3, distribution="gamma")


def test_new_seed_varies():
    seeds = {check.new_seed() for _ in range(20)}
    assert len(seeds) > 15
    assert all(0 <= s < 2**31 for s in seeds)


def test_relative_error():
    assert check.relative_error(torch.tensor([1.0, math.nan]), torch.tensor([1.0, 2.0])) == math.inf
    assert check.relative_error(torch.tensor([3.0, 4.0]), torch.zeros(2)) == pytest.approx(5.0)  # absolute
    assert check.relative_error(torch.tensor([1.0, 1.0]), torch.tensor([1.0, 2.0])) == pytest.approx(1 / math.sqrt(5))


def test_to_float64_upcasts_nested():
    x = torch.ones(2, dtype=torch.float16)
    i = torch.ones(2, dtype=torch.int32)
    out = check.to_float64({"a": (x, [x, i]), "b": 3})
    assert out["a"][0].dtype == torch.float64 and out["a"][1][0].dtype == torch.float64
    assert out["a"][1][1].dtype == torch.int32 and out["b"] == 3
    assert isinstance(out["a"], tuple) and isinstance(out["a"][1], list)


# ----------------------------------------------------------------------------------------------------------------
# check_function


def _double(x):
    return x * 2


def _double_with_a_slip(x):
    y = x * 2
    y[y.numel() // 3] += 0.5
    return y


def test_check_function_passes_for_correct_fn():
    x = check.random_tensor(333)
    rel = check.check_function(_double, lambda t: t * 2, (x,))
    assert rel == 0.0
    assert check.check_function(_double, lambda t: t * 2, x) == 0.0  # a single input need not be a tuple


def test_check_function_fails_for_wrong_fn():
    x = check.random_tensor(333)
    with pytest.raises(AssertionError) as e:
        check.check_function(_double_with_a_slip, lambda t: t * 2, (x,))
    msg = str(e.value)
    assert msg.startswith("_double_with_a_slip")  # named after the function
    assert "1 of 333 elements" in msg and "index (111)" in msg


def test_check_function_reference_sees_float64_copies():
    x = check.random_tensor(9, 4, dtype=torch.float16)
    seen = {}

    def reference(a, k):
        seen["dtype"], seen["k"] = a.dtype, k
        return a * k

    def fn(a, k):
        seen["fn_dtype"] = a.dtype
        return a * k

    check.check_function(fn, reference, (x, 3), name="scale")
    assert seen == {"dtype": torch.float64, "k": 3, "fn_dtype": torch.float16}
    assert x.dtype == torch.float16  # inputs are not changed


def test_check_function_tuple_outputs():
    x = check.random_tensor(64)
    ok = lambda t: (t + 1, t.sum().reshape(1))
    check.check_function(ok, ok, (x,))
    bad = lambda t: (t + 1, t.sum().reshape(1) + 1)
    with pytest.raises(AssertionError, match=re.escape("[1]")):
        check.check_function(bad, ok, (x,), name="pair")


# ----------------------------------------------------------------------------------------------------------------
# bad input: refused with the argument's name


def test_a_nan_tolerance_cannot_pass_anything():
    ref = _ref(8)
    with pytest.raises(ValueError, match="rtol"):
        check.assert_close(ref + 100, ref, rtol=math.nan)


def test_shape_mismatch_is_a_failed_check_and_a_refused_argument():
    with pytest.raises(check.ShapeMismatch) as e:
        check.assert_close(torch.ones(2, 1), torch.ones(1, 2))
    assert isinstance(e.value, AssertionError) and isinstance(e.value, ValueError)
    assert "nothing is broadcast" in str(e.value)


def test_atol_allows_an_absolute_difference():
    ref = torch.zeros(4, dtype=torch.float64)
    with pytest.raises(AssertionError):
        check.assert_close(ref + 1e-3, ref, rtol=0.0)
    check.assert_close(ref + 1e-3, ref, rtol=0.0, atol=2e-3)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int32, torch.int64])
def test_random_tensor_integers_are_non_zero(dtype):
    x = check.random_tensor(1000, dtype=dtype, device="cpu", scale=3.0)
    assert (x != 0).all() and x.abs().max() <= 3
    if dtype != torch.uint8:
        assert (x < 0).any() and (x > 0).any()


def test_random_tensor_underflow_is_made_non_zero():
    x = check.random_tensor(1000, dtype=torch.float16, device="cpu", scale=1e-12)
    assert (x != 0).all()


CHECK_BAD = [
    (
        "assert_close rtol=nan",
        lambda: check.assert_close(torch.ones(2), torch.ones(2), rtol=math.nan),
        ValueError,
        "rtol",
    ),
    (
        "assert_close rtol=inf",
        lambda: check.assert_close(torch.ones(2), torch.ones(2), rtol=math.inf),
        ValueError,
        "rtol",
    ),
    ("assert_close rtol<0", lambda: check.assert_close(torch.ones(2), torch.ones(2), rtol=-1e-3), ValueError, "rtol"),
    ("assert_close rtol='x'", lambda: check.assert_close(torch.ones(2), torch.ones(2), rtol="x"), TypeError, "rtol"),
    ("assert_close atol<0", lambda: check.assert_close(torch.ones(2), torch.ones(2), atol=-1.0), ValueError, "atol"),
    (
        "assert_close atol=nan",
        lambda: check.assert_close(torch.ones(2), torch.ones(2), atol=math.nan),
        ValueError,
        "atol",
    ),
    (
        "assert_close allow_nonfinite=1",
        lambda: check.assert_close(torch.ones(2), torch.ones(2), allow_nonfinite=1),
        TypeError,
        "allow_nonfinite",
    ),
    ("assert_close dtype", lambda: check.assert_close(torch.ones(2), torch.ones(2), dtype="fp8"), ValueError, "dtype"),
    ("assert_close shapes", lambda: check.assert_close(torch.ones(2, 1), torch.ones(1, 2)), ValueError, "shape"),
    (
        "relative_error shapes",
        lambda: check.relative_error(torch.ones(2, 1), torch.ones(1, 2)),
        ValueError,
        "out has shape [2, 1]",
    ),
    ("relative_error lengths", lambda: check.relative_error(torch.ones(3), torch.ones(2)), ValueError, "ref"),
    ("tolerance", lambda: check.tolerance("int4"), ValueError, "dtype"),
    ("random_tensor scale=0", lambda: check.random_tensor(3, scale=0), ValueError, "scale"),
    ("random_tensor scale<0", lambda: check.random_tensor(3, scale=-1.0), ValueError, "scale"),
    ("random_tensor scale=nan", lambda: check.random_tensor(3, scale=math.nan), ValueError, "scale"),
    ("random_tensor scale='big'", lambda: check.random_tensor(3, scale="big"), TypeError, "scale"),
    ("random_tensor shape<0", lambda: check.random_tensor(-3), ValueError, "shape[0]"),
    ("random_tensor shape=2.5", lambda: check.random_tensor(4, 2.5), TypeError, "shape[1]"),
    ("random_tensor dtype=str", lambda: check.random_tensor(3, dtype="float32"), TypeError, "dtype"),
    ("random_tensor bool", lambda: check.random_tensor(3, dtype=torch.bool), ValueError, "dtype"),
    ("random_tensor seed<0", lambda: check.random_tensor(3, seed=-1), ValueError, "seed"),
    ("random_tensor seed=1.0", lambda: check.random_tensor(3, seed=1.0), TypeError, "seed"),
    ("random_tensor distribution", lambda: check.random_tensor(3, distribution="gamma"), ValueError, "distribution"),
    ("assert_close magnitude list", lambda: check.assert_close(torch.ones(2), torch.ones(2), magnitude=[1.0, 1.0]),
     TypeError, "magnitude"),
    ("assert_close magnitude shape", lambda: check.assert_close(torch.ones(2), torch.ones(2), magnitude=torch.ones(1)),
     ValueError, "magnitude"),
    ("assert_close magnitude negative",
     lambda: check.assert_close(torch.ones(2), torch.ones(2), magnitude=-torch.ones(2)), ValueError, "magnitude"),
    ("assert_close magnitude NaN",
     lambda: check.assert_close(torch.ones(2), torch.ones(2), magnitude=torch.full((2,), math.nan)), ValueError,
     "magnitude"),
    ("assert_close magnitude tuple",
     lambda: check.assert_close((torch.ones(2),), (torch.ones(2),), magnitude=torch.ones(2)), TypeError, "magnitude"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "error", "words"), [b[1:] for b in CHECK_BAD], ids=[b[0] for b in CHECK_BAD])
def test_check_refuses_bad_input_naming_the_argument(call, error, words):
    with pytest.raises(error) as e:
        call()
    assert words in str(e.value)


def test_assert_close_magnitude_allows_the_rounding_of_cancelling_terms_only():
    # o = sum_j p_j v_j over three terms that nearly cancel: rounding each term to bf16 moves o by about
    # tol * sum_j |p_j v_j|, far above tol * |o|. The terms' sizes as magnitude take that; a wrong element still fails.
    g = torch.Generator().manual_seed(5)
    p = torch.softmax(torch.randn(64, 3, dtype=torch.float64, generator=g), dim=-1)
    v = torch.randn(64, 3, dtype=torch.float64, generator=g) * 8
    v[:, 2] = -(p[:, 0] * v[:, 0] + p[:, 1] * v[:, 1]) / p[:, 2] + 1e-2  # each row cancels to about 1e-2
    ref = (p * v).sum(-1)
    big = torch.cat([ref, torch.randn(4000, dtype=torch.float64, generator=g) * 1e-3])  # rms(ref) small
    out = torch.cat([(p.bfloat16() * v.bfloat16()).double().sum(-1), big[64:]])
    size = torch.cat([(p * v).abs().sum(-1), big[64:].abs()])
    with pytest.raises(AssertionError, match="differ"):
        check.assert_close(out.to(torch.bfloat16), big)
    check.assert_close(out.to(torch.bfloat16), big, magnitude=size)
    wrong = out.clone()
    wrong[3] += 0.5 * size[3]
    with pytest.raises(AssertionError, match="differ"):
        check.assert_close(wrong.to(torch.bfloat16), big, magnitude=size)


def test_assert_close_drifting_takes_rare_rounding_not_wrong_elements():
    ref = torch.randn(4, 1000, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    tol = check.tolerance(torch.bfloat16)
    drift = ref.clone()
    drift[0, :3] += 2.5 * tol * (ref[0, :3].abs() + 1.0)  # a few elements a few ulps off
    with pytest.raises(AssertionError, match="differ"):
        check.assert_close(drift.to(torch.bfloat16), ref)  # the plain check refuses them
    assert check.assert_close_drifting(drift.to(torch.bfloat16), ref) < tol
    wrong = drift.clone()
    wrong[1, 7] = 5.0
    with pytest.raises(AssertionError, match="(?s)states.*differ"):
        check.assert_close_drifting(wrong.to(torch.bfloat16), ref, name="states")
    off = ref * (1 + 2 * tol)  # every element just inside 4x, the whole too far off
    with pytest.raises(AssertionError, match="norm-wise relative error"):
        check.assert_close_drifting(off.to(torch.bfloat16), ref)


@pytest.mark.parametrize("slack", [0.5, math.nan, math.inf, "4"])
def test_assert_close_drifting_refuses_a_bad_slack(slack):
    ref = torch.zeros(3, dtype=torch.float64)
    with pytest.raises((ValueError, TypeError), match="slack"):
        check.assert_close_drifting(ref.float(), ref, slack=slack)
