"""Bad input to the split kernels' exchanges, clock stamps, step and as-called bench parts and their readers: a clear
error naming the argument, before anything runs."""

import pytest
import torch

from gpulab.rnn.fused import clocks, exchange
from gpulab.rnn.fused.measure import called_bench, split_report, steps_bench

BAD = [
    ("clock_buffer programs", lambda: clocks.clock_buffer(0, 8, "cpu"), ValueError, "programs"),
    ("clock_buffer steps", lambda: clocks.clock_buffer(2, 1.5, "cpu"), TypeError, "steps"),
    ("step_parts not a buffer", lambda: clocks.step_parts(torch.zeros(3, 4)), TypeError, "clock_buffer"),
    ("step_parts skip", lambda: clocks.step_parts(torch.zeros(1, 40, 8), skip=-1), ValueError, "skip"),
    ("tagged_fits dtype", lambda: exchange.tagged_fits("bf16", 64, 16), TypeError, "dtype"),
    ("tagged_fits head_dim", lambda: exchange.tagged_fits(torch.bfloat16, 0, 16), ValueError, "head_dim"),
    ("hinted_fits dtype", lambda: exchange.hinted_fits("bf16"), TypeError, "dtype"),
    ("tagged_state device", lambda: exchange.tagged_state("cpu", 4, 8, "forward"), TypeError, "device"),
    ("tagged_state words", lambda: exchange.tagged_state(torch.device("cpu"), 4, 0, "forward"), ValueError, "words"),
    ("tagged_state kind", lambda: exchange.tagged_state(torch.device("cpu"), 4, 8, ""), TypeError, "kind"),
    ("exchange_as name", lambda: steps_bench.exchange_as("ll128").__enter__(), ValueError, "name"),
    ("called problems str", lambda: called_bench.called(problems="tiny"), TypeError, "problems"),
    ("called problems name", lambda: called_bench.called(problems=["huge"]), ValueError, "problems"),
    ("parts_table rows", lambda: split_report.parts_table({"kind": "parts"}), TypeError, "rows"),
    ("exchange_table rows", lambda: split_report.exchange_table("steps"), TypeError, "rows"),
    ("hinted_table rows", lambda: split_report.hinted_table("hinted"), TypeError, "rows"),
    ("exchange_row rows", lambda: split_report.exchange_row([1], "barrier"), TypeError, "rows"),
    ("called_table rows", lambda: split_report.called_table(None), TypeError, "rows"),
]


@pytest.mark.parametrize(("call", "error", "words"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_refuse_bad_input_naming_the_argument(call, error, words):
    with pytest.raises(error) as e:
        call()
    assert words in str(e.value)
