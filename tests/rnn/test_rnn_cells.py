"""The recurrent cells (gpulab.rnn.cells): the fused LSTM pointwise kernel against its reference and twin."""

import pytest
import torch

from gpulab import check, runtime
from gpulab.rnn import cells


@pytest.mark.parametrize("n, nh, dh", [(1, 1, 1), (3, 1, 100), (5, 2, 7), (2, 1, 257), (4, 3, 33)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_pointwise_matches_reference_and_twin(n, nh, dh, dtype):
    gates = check.random_tensor(n, 4, nh, dh, dtype=dtype, scale=2.0)
    c = check.random_tensor(n, nh, dh, dtype=torch.float32)
    bias = check.random_tensor(4, nh, dh, dtype=dtype)
    h_out, c_out = check.poisoned(n, nh, dh, dtype=dtype), check.poisoned(n, nh, dh, dtype=torch.float32)
    h, c_new = cells.lstm_pointwise(gates, c, bias, h_out=h_out, c_out=c_out)
    assert h is h_out and c_new is c_out
    h_ref, c_ref = cells.lstm_pointwise_reference(gates, c, bias)
    # |h| <= 1 and h near 0 has no relative precision to spare (h = sigmoid(o) tanh(c) with c ~ 0): an absolute
    # allowance of a few fp32 ulps of 1 keeps a lone near-zero h from failing on rounding alone
    check.assert_close(h, h_ref, name="h", atol=1e-6)
    check.assert_close(c_new, c_ref, dtype=dtype, name="c")  # gates rounded to dtype: the state's error follows
    # The twin computes the same in PyTorch (fp32): agreement within fp32 rounding of the inputs.
    i, f, z, o = (gates.float() + bias.float()).unbind(1)
    h_twin, c_twin = cells.lstm_cell_torch(i, f, z, o, c)
    check.assert_close(h.float(), h_twin.double(), dtype=dtype, name="h vs twin", atol=1e-6)
    # c = f c + i z can cancel to near 0 from terms of size ~1: fp32 rounding of those terms (~1e-7) is absolute
    check.assert_close(c_new, c_twin.double(), dtype=torch.float32, rtol=1e-5, atol=1e-6, name="c vs twin")


def test_pointwise_per_layer_bias_in_place_and_strided_h():
    layers, b, h = 3, 2, 9
    gates = check.random_tensor(layers * b, 4, 1, h)
    c = check.random_tensor(layers * b, 1, h)
    bias = check.random_tensor(layers, 4, 1, h)
    h_ref, c_ref = cells.lstm_pointwise_reference(gates, c, bias)
    state = check.poisoned(b, layers + 1, h)  # interleaved [B, L+1, H]: h of layer l goes to state[:, l]
    h_view = state[:, :layers].transpose(0, 1)  # [L, B, H], strided
    cells.lstm_pointwise(gates, c, bias, h_out=h_view, c_out=c)  # c updated in place
    check.assert_close(h_view.reshape(layers * b, 1, h), h_ref, name="h (strided)")
    check.assert_close(c, c_ref, name="c (in place)")
    assert torch.isnan(state[:, layers]).all(), "the kernel wrote outside its view"


@pytest.mark.parametrize("n", [1, 17])
def test_pointwise_adds_a_second_gate_part(n):
    """gates2: two products computed apart (step 8) are added inside the kernel."""
    gates, gates2 = check.random_tensor(n, 4, 1, 33), check.random_tensor(n, 4, 1, 33)
    c, bias = check.random_tensor(n, 1, 33), check.random_tensor(4, 1, 33)
    h_out, c_out = check.poisoned(n, 1, 33), check.poisoned(n, 1, 33)
    cells.lstm_pointwise(gates, c, bias, h_out=h_out, c_out=c_out, gates2=gates2)
    h_ref, c_ref = cells.lstm_pointwise_reference(gates, c, bias, gates2=gates2)
    check.assert_close(h_out, h_ref, name="h")
    check.assert_close(c_out, c_ref, name="c")
    with pytest.raises(ValueError, match="gates2 must be"):
        cells.lstm_pointwise(gates, c, gates2=gates2[:, :, :, :32].contiguous())


def test_pointwise_validation():
    g = check.random_tensor(2, 4, 1, 8)
    c = check.random_tensor(2, 1, 8)
    with pytest.raises(ValueError, match="gates must be"):
        cells.lstm_pointwise(g.view(2, 32), c)
    with pytest.raises(ValueError, match="c must be"):
        cells.lstm_pointwise(g, c.view(1, 2, 8))
    with pytest.raises(ValueError, match="bias must be"):
        cells.lstm_pointwise(g, c, check.random_tensor(3, 4, 1, 8))
    with pytest.raises(ValueError, match="contiguous"):
        cells.lstm_pointwise(check.random_tensor(4, 2, 1, 8).transpose(0, 1), c)
    with pytest.raises(TypeError, match="gates must be a torch.Tensor"):
        cells.lstm_pointwise(g.tolist(), c)
    if not runtime.on_gpu():
        with pytest.raises(ValueError, match="bfloat16"):
            cells.lstm_pointwise(g.bfloat16(), c)
