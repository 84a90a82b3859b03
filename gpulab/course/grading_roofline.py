"""Graders for exercise 1 (the roofline). Each takes the learner's function, runs it on fresh random sizes against
the reference in :mod:`gpulab.roofline`, and raises AssertionError with a message that says what to fix. On success
it prints one deterministic line (nbval compares it)."""

from __future__ import annotations

import math
import numbers

from gpulab import hardware, roofline, runtime
from gpulab.course.grading import fresh_rng, grader, require_callable

_DTYPE_OF_ITEMSIZE = {2: "float16", 4: "float32"}


def _close(got, want, rel=1e-9) -> bool:
    return isinstance(got, numbers.Real) and not isinstance(got, bool) and abs(got - want) <= rel * max(1.0, abs(want))


def _pair(name, got, args):
    """The learner's (flops, bytes) as a pair of numbers, or an AssertionError that says what came back."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise AssertionError(f"{name}{args} returned {got!r}; return a pair (flops, bytes).")
    return got


def _check_cost(name, got, args, ref: roofline.Intensity, hints):
    """Compare the learner's (flops, bytes) with the reference; ``hints`` are (matches a known mistake, advice)."""
    flops, nbytes = got
    problems = []
    if not _close(flops, ref.flops):
        problems.append(f"FLOPs: got {flops!r}, expected {ref.flops:,.0f}")
    if not _close(nbytes, ref.bytes):
        problems.append(f"bytes: got {nbytes!r}, expected {ref.bytes:,.0f}")
    if problems:
        hint = next((h for matches, h in hints if matches), "")
        raise AssertionError(f"{name}{args}: " + "; ".join(problems) + (f". {hint}" if hint else "."))


@grader("roofline formula")
def grade_attainable(attainable_tflops, cases=40):
    """``attainable_tflops(intensity, peak_tflops, bandwidth_gbps) -> TFLOP/s``: min(peak, intensity * bandwidth)."""
    require_callable("attainable_tflops", attainable_tflops)
    cases = runtime.positive_int("cases", cases)
    rng, _ = fresh_rng()
    tried = [(0.0, 989.4, 3350.0), (1 / 12, 989.4, 3350.0), (295.34, 989.4, 3350.0), (1e4, 66.9, 3350.0)]
    for _ in range(cases):
        tried.append((10 ** rng.uniform(-2, 4), 10 ** rng.uniform(0, 3.5), 10 ** rng.uniform(2, 4.5)))
    for i, p, bw in tried:
        got, want = attainable_tflops(i, p, bw), roofline.attainable(i, p, bw)
        if not _close(got, want):
            hint = ""
            if _close(got, min(p, i * bw)):
                hint = " GB/s times FLOP/byte is GFLOP/s: divide by 1000 to get TFLOP/s."
            elif _close(got, i * bw / 1e3) or _close(got, p):
                hint = " The roof is the smaller of the two bounds: min(peak, intensity * bandwidth)."
            raise AssertionError(
                f"attainable_tflops({i:.6g}, {p:.6g}, {bw:.6g}) returned {got!r}, expected {want:.6g} TFLOP/s.{hint}"
            )
    return f"{len(tried)} cases"


@grader("GEMM cost")
def grade_gemm_cost(gemm_cost, cases=25):
    """``gemm_cost(m, n, k, itemsize) -> (flops, bytes)`` for C[m, n] = A[m, k] @ B[k, n]."""
    require_callable("gemm_cost", gemm_cost)
    cases = runtime.positive_int("cases", cases)
    rng, _ = fresh_rng()
    for _ in range(cases):
        m, n, k, s = rng.randint(1, 5000), rng.randint(1, 5000), rng.randint(1, 5000), rng.choice((2, 4))
        ref = roofline.gemm(m, n, k, _DTYPE_OF_ITEMSIZE[s])
        f, b = got = _pair("gemm_cost", gemm_cost(m, n, k, s), (m, n, k, s))
        hints = [
            (_close(f, ref.flops / 2), "A multiply-add counts as 2 FLOPs: 2*m*n*k."),
            (_close(b, ref.bytes - m * n * s), "Count the write of C (m x n) too."),
            (_close(b, ref.bytes / s), "Bytes, not elements: multiply by itemsize."),
        ]
        _check_cost("gemm_cost", got, (m, n, k, s), ref, hints)
    return f"{cases} random shapes"


@grader("softmax cost")
def grade_softmax_cost(softmax_cost, cases=25):
    """``softmax_cost(rows, cols, itemsize) -> (flops, bytes)``: 5 FLOPs per element, read once, write once."""
    require_callable("softmax_cost", softmax_cost)
    cases = runtime.positive_int("cases", cases)
    rng, _ = fresh_rng()
    for _ in range(cases):
        r, c, s = rng.randint(1, 20000), rng.randint(1, 20000), rng.choice((2, 4))
        ref = roofline.softmax(r, c, _DTYPE_OF_ITEMSIZE[s])
        f, b = got = _pair("softmax_cost", softmax_cost(r, c, s), (r, c, s))
        hints = [
            (_close(b, ref.bytes / 2), "The output is written as well as the input read: 2 passes."),
            (_close(b, ref.bytes / s), "Bytes, not elements: multiply by itemsize."),
            (not _close(f, ref.flops), "The course counts 5 FLOPs per element (max, subtract, exp, sum, divide)."),
        ]
        _check_cost("softmax_cost", got, (r, c, s), ref, hints)
    return f"{cases} random shapes"


@grader("LSTM step cost")
def grade_lstm_step_cost(lstm_step_cost, cases=25):
    """``lstm_step_cost(batch, input_size, hidden, itemsize) -> (flops, bytes)`` for one LSTM step."""
    require_callable("lstm_step_cost", lstm_step_cost)
    cases = runtime.positive_int("cases", cases)
    rng, _ = fresh_rng()
    for _ in range(cases):
        b, i, h, s = rng.randint(1, 512), rng.randint(1, 4096), rng.randint(1, 4096), rng.choice((2, 4))
        ref = roofline.lstm_step(b, i, h, _DTYPE_OF_ITEMSIZE[s])
        weights = (4 * h * (i + h) + 4 * h) * s
        f, nb = got = _pair("lstm_step_cost", lstm_step_cost(b, i, h, s), (b, i, h, s))
        hints = [
            (_close(f, ref.flops / 4), "There are 4 gates: the weight matrices have 4H rows."),
            (_close(f, ref.flops / 2), "A multiply-add counts as 2 FLOPs."),
            (_close(nb, ref.bytes - 4 * h * s), "Count the bias (4H elements) too."),
            (_close(nb, ref.bytes - weights), "The weights W, U (and the bias) are read at every step."),
            (_close(nb, ref.bytes - 2 * b * h * s), "Count both writes, h_t and c_t."),
            (_close(nb, ref.bytes / s), "Bytes, not elements: multiply by itemsize."),
        ]
        _check_cost("lstm_step_cost", got, (b, i, h, s), ref, hints)
    return f"{cases} random sizes"


def _is_answer(got):
    if got not in ("memory", "compute"):
        raise AssertionError(f"bound(...) returned {got!r}; return 'memory' or 'compute' (lower case).")


@grader("memory- or compute-bound")
def grade_bound(bound, cases=40):
    """``bound(flops, bytes, peak_tflops, bandwidth_gbps) -> 'memory' | 'compute'``."""
    require_callable("bound", bound)
    cases = runtime.positive_int("cases", cases)
    rng, _ = fresh_rng()
    tried = 0
    for spec in hardware.SPECS.values():
        for dtype in ("float32", "float16"):
            peak, bw = spec.peak_tflops(dtype), spec.hbm_gbps
            ridge = roofline.ridge_point(peak, bw)
            drawn = rng.uniform(0.01, 100)
            drawn = drawn if abs(drawn - 1) > 1e-3 else 2.0  # never right at the ridge: both answers hold there
            for factor in (0.5, 0.99, 1.01, 3.0, drawn):
                nbytes = rng.randint(1, 10**9)
                flops = ridge * factor * nbytes
                got, want = bound(flops, nbytes, peak, bw), roofline.bound(flops / nbytes, peak, bw)
                tried += 1
                _is_answer(got)
                if got != want:
                    raise AssertionError(
                        f"bound({flops:.6g}, {nbytes}, {peak:g}, {bw:g}) returned {got!r}, expected {want!r}: the "
                        f"intensity is {flops / nbytes:.4g} FLOP/byte and the ridge point {ridge:.4g} "
                        f"({spec.name}, {dtype}). Below the ridge the bytes take longer than the FLOPs."
                    )
    for _ in range(cases):
        peak, bw, nbytes = 10 ** rng.uniform(0, 3), 10 ** rng.uniform(2, 4), rng.randint(1, 10**9)
        factor = 10 ** rng.choice((rng.uniform(-3, -0.01), rng.uniform(0.01, 3)))
        flops = roofline.ridge_point(peak, bw) * factor * nbytes
        got, want = bound(flops, nbytes, peak, bw), roofline.bound(flops / nbytes, peak, bw)
        tried += 1
        _is_answer(got)
        if got != want:
            raise AssertionError(
                f"bound({flops:.6g}, {nbytes}, {peak:.6g}, {bw:.6g}) returned {got!r}, expected {want!r} "
                f"(intensity {flops / nbytes:.4g}, ridge point {roofline.ridge_point(peak, bw):.4g} FLOP/byte)."
            )
    return f"{tried} cases"


def smallest_compute_bound_batch(input_size, hidden, itemsize, peak_tflops, bandwidth_gbps):
    """Reference: the smallest batch at which one LSTM step (:func:`gpulab.roofline.lstm_step`) reaches the ridge
    point, or None if no batch does (the intensity rises with the batch towards a limit that may lie below it)."""
    i, h, s = input_size, hidden, itemsize
    ridge = roofline.ridge_point(peak_tflops, bandwidth_gbps)
    # I(B) = 8BH(I+H) / (s (B (I + 4H) + W)) with W the weight and bias elements, which B does not multiply.
    weights = 4 * h * (i + h) + 4 * h
    slope = 8 * h * (i + h) - ridge * s * (i + 4 * h)
    if slope <= 0:
        return None
    b = max(1, math.ceil(ridge * s * weights / slope))
    dtype = _DTYPE_OF_ITEMSIZE[s]
    while b > 1 and roofline.lstm_step(b - 1, i, h, dtype).intensity >= ridge:  # guard against rounding in ceil
        b -= 1
    while roofline.lstm_step(b, i, h, dtype).intensity < ridge:
        b += 1
    return b


@grader("smallest compute-bound batch")
def grade_compute_bound_batch(fn, cases=20):
    """``fn(input_size, hidden, itemsize, peak_tflops, bandwidth_gbps) -> int | None``."""
    require_callable("fn", fn)
    cases = runtime.positive_int("cases", cases)
    rng, _ = fresh_rng()
    tried = [(1024, 1024, 2, 989.4, 3350.0), (64, 64, 2, 989.4, 3350.0), (4096, 4096, 4, 494.7, 3350.0)]
    gpus = list(hardware.SPECS.values())
    for _ in range(cases):
        spec = rng.choice(gpus)
        s = rng.choice((2, 4))
        peak = spec.peak_tflops("float16" if s == 2 else "tf32")
        tried.append((rng.randint(16, 4096), rng.randint(16, 4096), s, peak, float(spec.hbm_gbps)))
    for i, h, s, peak, bw in tried:
        got, want = fn(i, h, s, peak, bw), smallest_compute_bound_batch(i, h, s, peak, bw)
        args = f"({i}, {h}, {s}, {peak:g}, {bw:g})"
        if want is None:
            if got is not None:
                raise AssertionError(
                    f"fn{args} returned {got!r}, expected None: as the batch grows the intensity only approaches "
                    "8H(I+H) / (s (I + 4H)), which stays below the ridge point for these sizes."
                )
            continue
        if isinstance(got, bool) or not isinstance(got, numbers.Integral):
            raise AssertionError(f"fn{args} returned {got!r}; return a whole batch size (an int) or None.")
        ridge = roofline.ridge_point(peak, bw)
        intensity = lambda b, i=i, h=h, s=s: roofline.lstm_step(b, i, h, _DTYPE_OF_ITEMSIZE[s]).intensity
        # Judge by the property, not equality, so a closed form and a search that round differently both pass.
        reaches = got >= 1 and intensity(got) >= ridge * (1 - 1e-12)
        smallest = got == 1 or intensity(got - 1) < ridge * (1 + 1e-12)
        if not (reaches and smallest):
            raise AssertionError(
                f"fn{args} returned {got!r}, expected {want}: the ridge point is {ridge:.4g} FLOP/byte; at batch "
                f"{want} one step has intensity {intensity(want):.4g}"
                + (f", at {want - 1} only {intensity(want - 1):.4g}." if want > 1 else ".")
            )
    return f"{len(tried)} cases"
