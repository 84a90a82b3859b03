"""Property-based tests of the validation vocabulary (gpulab.runtime) and of gpulab.check: whatever the input, a
refusal names the argument, accepted values come back unchanged, NaN never passes a check."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from gpulab import check, runtime

names = st.sampled_from(["n", "block", "scale", "rtol", "is_causal"])
anything = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=5), st.lists(st.integers())
)


@given(names, st.integers(-(2**40), 2**40), st.integers(-100, 100))
def test_integer_accepts_integers_in_range_and_names_the_argument_otherwise(name, value, minimum):
    if value >= minimum:
        assert runtime.integer(name, value, minimum=minimum) == value
    else:
        with pytest.raises(ValueError, match=name):
            runtime.integer(name, value, minimum=minimum)


@given(names, st.one_of(st.floats(), st.booleans(), st.text(max_size=3), st.none()))
def test_integer_refuses_non_integers_as_argument_type_errors(name, value):
    with pytest.raises(runtime.ArgumentTypeError, match=name):
        runtime.positive_int(name, value)


@given(names, st.integers())
def test_positive_and_nonnegative_int_agree_with_their_definition(name, value):
    for fn, ok in ((runtime.positive_int, value >= 1), (runtime.nonnegative_int, value >= 0)):
        if ok:
            assert fn(name, value) == value
        else:
            with pytest.raises(ValueError, match=name):
                fn(name, value)


@given(names, st.floats(allow_nan=True, allow_infinity=True), st.booleans())
def test_finite_float_accepts_exactly_the_finite_values_in_range(name, value, positive):
    if math.isfinite(value) and (value > 0 or not positive):
        assert runtime.finite_float(name, value, positive=positive) == value
    else:
        with pytest.raises(ValueError, match=name):
            runtime.finite_float(name, value, positive=positive)


@given(names, anything)
def test_strict_bool_accepts_only_bools(name, value):
    if isinstance(value, bool):
        assert runtime.strict_bool(name, value) is value
    else:
        with pytest.raises(TypeError, match=name):
            runtime.strict_bool(name, value)


@given(names, anything, st.lists(st.one_of(st.integers(), st.text(max_size=3)), min_size=1, max_size=4))
def test_one_of_returns_a_choice_or_lists_the_choices(name, value, choices):
    if any(value == c and type(value) is type(c) for c in choices):
        assert runtime.one_of(name, value, choices) == value
    else:
        with pytest.raises(ValueError, match=name) as e:
            runtime.one_of(name, value, choices)
        assert all(repr(c) in str(e.value) for c in choices)


shapes = st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple)


@given(shapes, shapes)
def test_same_shape_refuses_every_difference_including_broadcastable_ones(a, b):
    x, y = torch.zeros(a), torch.zeros(b)
    if a == b:
        runtime.same_shape("out", x, "ref", y)
    else:
        with pytest.raises(ValueError, match="out has shape"):
            runtime.same_shape("out", x, "ref", y)
        with pytest.raises(ValueError, match="out"):
            check.relative_error(x, y)


finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, width=32)
vectors = st.lists(finite, min_size=1, max_size=16)


@given(vectors, st.integers(0, 15), st.sampled_from([math.nan, math.inf, -math.inf]), st.floats(0, 1e6))
def test_assert_close_never_passes_a_nonfinite_element(values, where, bad, rtol):
    ref = torch.tensor(values, dtype=torch.float64)
    out = ref.clone()
    out[where % len(values)] = bad
    with pytest.raises(AssertionError):
        check.assert_close(out, ref, rtol=rtol)


@given(vectors, st.sampled_from([math.nan, math.inf, -math.inf, -1e-9, -1.0]))
def test_assert_close_refuses_a_nonfinite_or_negative_tolerance(values, rtol):
    ref = torch.tensor(values, dtype=torch.float64)
    with pytest.raises(ValueError, match="rtol"):
        check.assert_close(ref, ref, rtol=rtol)
    with pytest.raises(ValueError, match="atol"):
        check.assert_close(ref, ref, atol=rtol)


@given(vectors)
def test_assert_close_passes_a_tensor_against_itself(values):
    ref = torch.tensor(values, dtype=torch.float64)
    assert check.assert_close(ref.clone(), ref, rtol=0.0) == 0.0


@given(vectors, vectors)
def test_relative_error_is_zero_only_for_equal_tensors_and_symmetric_in_the_difference(a, b):
    n = min(len(a), len(b))
    x, y = torch.tensor(a[:n], dtype=torch.float64), torch.tensor(b[:n], dtype=torch.float64)
    e = check.relative_error(x, y)
    assert e >= 0 and (e == 0) == torch.equal(x, y)
    # The numerator is symmetric: ||x - y|| * (||y|| or 1) == ||y - x|| * (||x|| or 1)
    back = check.relative_error(y, x)
    nx, ny = torch.linalg.vector_norm(x).item(), torch.linalg.vector_norm(y).item()
    assert e * (ny or 1.0) == pytest.approx(back * (nx or 1.0), rel=1e-9, abs=1e-9)


@given(st.floats(1e-12, 1e6), st.sampled_from([torch.float16, torch.float32, torch.bfloat16, torch.int8, torch.int32]))
def test_random_tensor_is_never_zero_at_any_scale(scale, dtype):
    x = check.random_tensor(64, dtype=dtype, scale=scale, device="cpu", seed=0)
    assert x.dtype == dtype and (x != 0).all()
