"""gpulab.attention.rope refuses bad input with a TypeError or ValueError that names the argument and what is allowed.

One table: (id, call, expected exception, a word the message must contain)."""

import pytest
import torch

from gpulab.attention import rope as R

QKV = torch.zeros(1, 3, 12)  # B 1, N 3, 2 heads of 2

CASES = [
    ("rope-odd", lambda: R.rope(torch.zeros(1, 1, 3, 5)), ValueError, "even head dimension"),
    ("rope-int", lambda: R.rope(torch.zeros(1, 1, 3, 4, dtype=torch.int32)), ValueError, "floating-point"),
    ("angles-half-0", lambda: R.rope_angles(4, 0), ValueError, "half"),
    ("angles-dtype-int", lambda: R.rope_angles(4, 2, dtype=torch.int32), TypeError, "dtype must"),
    ("tables-half-0", lambda: R.rope_tables(4, 0), ValueError, "half"),
    ("tables-n-negative", lambda: R.rope_tables(-1, 2), ValueError, "n must"),
    ("tables-base-nan", lambda: R.rope_tables(4, 2, float("nan")), ValueError, "base"),
    ("rope-head-dim-0", lambda: R.rope(torch.zeros(1, 1, 3, 0)), ValueError, "got 0 (x's last dimension"),
    ("heads-head-dim-0", lambda: R.qkv_heads(torch.zeros(1, 3, 0), 2), ValueError, "got 0 (qkv's last dimension"),
    ("angles-device-name", lambda: R.rope_angles(4, 2, device="nonsense"), ValueError, "device='nonsense'"),
    ("angles-device-float", lambda: R.rope_angles(4, 2, device=1.5), TypeError, "device must be"),
    ("angles-device-meta", lambda: R.rope_angles(4, 2, device="meta"), ValueError, "device='meta'"),
    ("tables-device-meta", lambda: R.rope_tables(4, 2, device=torch.device("meta")), ValueError, "device='meta'"),
    ("heads-list", lambda: R.qkv_heads([[1.0]], 2), TypeError, "qkv must"),
    ("heads-4d", lambda: R.qkv_heads(torch.zeros(1, 3, 2, 6), 2), ValueError, "[B, N, 3 * d_model]"),
    ("heads-int", lambda: R.qkv_heads(torch.zeros(1, 3, 12, dtype=torch.int64), 2), ValueError, "floating-point"),
    ("heads-0", lambda: R.qkv_heads(QKV, 0), ValueError, "num_heads"),
    ("heads-float", lambda: R.qkv_heads(QKV, 2.0), TypeError, "num_heads"),
    ("heads-not-dividing", lambda: R.qkv_heads(QKV, 5), ValueError, "divisible by 15"),
    ("heads-odd-dim-rope", lambda: R.qkv_heads(torch.zeros(1, 3, 18), 2), ValueError, "even head dimension"),
    ("heads-positional", lambda: R.qkv_heads(QKV, 2, positional="alibi"), ValueError, "positional"),
    ("heads-base-0", lambda: R.qkv_heads(QKV, 2, base=0), ValueError, "base"),
    ("reference-heads-0", lambda: R.qkv_heads_reference(QKV, 0), ValueError, "num_heads"),
]


@pytest.mark.parametrize("call, exc, word", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input(call, exc, word):
    with pytest.raises(exc) as info:
        call()
    assert word in str(info.value), f"the message should say {word!r}: {info.value}"
