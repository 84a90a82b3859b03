"""On a GPU: ``gpulab.rnn.LSTM`` in fp16 on the fused backend's own GPU paths (the one-SM kernels at hidden 128, the
Gluon split kernels version 6 and b4 at hidden 256 and 512) against an fp32 ``nn.LSTM`` with the same weights
(:func:`gpulab.rnn.fused.measure.lstm_grid.check_against_torch`: outputs, h_n, c_n, dx and every parameter's
gradient), in nn.LSTM's configurations, after the biases were changed past autograd's version counter
(``bias.data[H:2H].fill_(1)``, the usual forget-gate initialisation). On CPU these run in the interpreter in
``test_module_nnlstm_grid.py``; here they are skipped without a GPU."""

import pytest
import torch

from gpulab import rnn, runtime
from gpulab.rnn.fused.measure.lstm_grid import check_against_torch

pytestmark = pytest.mark.gpu

CASES = [  # (hidden, layers, bidirectional, proj_size, B)
    (128, 1, False, 0, 3),
    (256, 1, False, 0, 16),
    (256, 2, True, 0, 16),
    (512, 1, False, 0, 17),
    (256, 2, False, 64, 16),
]


@pytest.mark.parametrize("hidden, layers, bi, proj, B", CASES, ids=lambda c: str(c))
def test_gpu_module_equals_nn_lstm_after_a_forget_gate_initialisation(hidden, layers, bi, proj, B):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    torch.manual_seed(0)
    module = rnn.LSTM(hidden, hidden, layers, batch_first=True, bidirectional=bi, proj_size=proj,
                      backend="fused").to(runtime.device, torch.float16)  # fmt: skip
    x = torch.randn(B, 48, hidden, device=runtime.device, dtype=torch.float16)
    name = f"H{hidden} L{layers} bi={bi} proj={proj} B{B}"
    assert check_against_torch(module, x, name, every_weight=True) == "ok"
    for pname, p in module.named_parameters():  # past the version counter, after a first call
        if pname.startswith("bias_"):
            p.data[hidden : 2 * hidden].fill_(1.0)
    assert check_against_torch(module, x, f"{name}, forget gate at 1", every_weight=True) == "ok"


@pytest.mark.parametrize("hidden", [256, 768])
def test_gpu_module_of_4096_rows_equals_nn_lstm_in_float64(hidden):
    """B 16, T 256 (the drop-in grid's host-bound points): past 2,048 rows the parameter products of a 16-bit head up
    to 768 run as one launch; the module in fp16 against nn.LSTM in float64 over all 256 steps (every gradient)."""
    from torch import nn

    from gpulab import check
    from gpulab.rnn.backends import parameter_grads

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    torch.manual_seed(hidden)
    ours = rnn.LSTM(hidden, hidden, batch_first=True, backend="fused").to(runtime.device, torch.float16)
    ref = nn.LSTM(hidden, hidden, batch_first=True).to(runtime.device, torch.float64)
    ref.load_state_dict({k: v.double() for k, v in ours.state_dict().items()})
    x = torch.randn(16, 256, hidden, device=runtime.device, dtype=torch.float16)
    assert parameter_grads.one_launch(torch.empty(2, 16, 256, 1, hidden, dtype=torch.float16, device="meta"))
    xo, xr = x.clone().requires_grad_(), x.double().requires_grad_()
    y, _ = ours(xo)
    y.float().sum().backward()
    y_r, _ = ref(xr)
    y_r.sum().backward()
    check.assert_close_drifting(y, y_r, name="output")
    check.assert_close_drifting(xo.grad, xr.grad, name="dx")
    mine = dict(ours.named_parameters())
    for name, p in ref.named_parameters():
        check.assert_close_drifting(mine[name].grad, p.grad, name=name)
