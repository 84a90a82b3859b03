"""The attention plan's configuration (the backward gate, the plan cache's size) refuses bad input with an error
naming the argument."""

import pytest

from gpulab.attention import plan

BAD = [
    ("gate-head-dims-list", lambda: plan.BackwardGate(head_dims=[64]), TypeError, "head_dims"),
    ("gate-min-seq-str", lambda: plan.BackwardGate(min_seq={(64, True): "1024"}), TypeError, "min_seq"),
    ("launches-gate-str", lambda: plan.backward_launches(None, *[None] * 6, gate="v3"), TypeError, "gate"),
    ("clear-cache-zero", lambda: plan.clear_plan_cache(0), ValueError, "max_plans"),
    ("launch-kind-none", lambda: plan.launch_kind(None), AttributeError, "kind"),
]


@pytest.mark.parametrize("call, error, word", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_plan_configuration_refuses_bad_input(call, error, word):
    with pytest.raises(error, match=word):
        call()
    plan.clear_plan_cache()  # the package's default size again
