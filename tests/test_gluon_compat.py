"""gpulab.gluon_compat: the Gluon calls found on the installed Triton by their parameters, the one tested list, and
the warnings that say once why a version does not run (the plans fall back as before)."""

import os
import warnings

import pytest
import torch
import triton

from gpulab import gluon_compat as compat


def test_the_ci_leg_runs_the_triton_it_installed():
    """`make test-triton371` sets GPULAB_EXPECT_TRITON: the PYTHONPATH install must be the Triton imported."""
    expected = os.environ.get("GPULAB_EXPECT_TRITON")
    if expected is None:
        pytest.skip("GPULAB_EXPECT_TRITON not set (only the Makefile's Triton legs set it)")
    assert triton.__version__ == expected


def test_every_call_is_found_on_this_triton():
    assert compat.problem() is None
    for fn in (compat._BARRIER, compat._LOAD, compat._STORE, compat._REINTERPRET, compat._STORE_WAIT):
        assert callable(fn)


def test_a_raising_stub_is_not_taken_for_the_call():
    """Triton 3.9 keeps ``async_copy_global_to_shared`` as ``(*args, **kwargs)`` raising "removed": its parameters
    name nothing the kernels pass, so the pick goes past it to the real call."""

    def stub(*args, _semantic=None, **kwargs):
        raise RuntimeError("async_copy_global_to_shared has been removed; call async_load instead")

    def real(tensor_desc, coord, barrier, result, pred=True, _semantic=None):
        return "real"

    needs = ("tensor_desc", "coord", "barrier", "result", "pred")
    assert compat._pick([stub, real], needs) is real
    assert compat._pick([None, stub], needs) is None
    assert compat._pick([real, stub], needs) is real


def test_the_builtins_need_a_kernel():
    """The layer's calls are builtins: outside a @gluon.jit function they refuse (no silent no-op)."""
    with pytest.raises(ValueError, match="jit"):
        compat.barrier()


def test_triton_minor_and_untested(monkeypatch):
    assert compat.triton_minor("3.7.1") == "3.7" and compat.triton_minor("3.10.0+git") == "3.10"
    with pytest.raises(ValueError, match="version"):
        compat.triton_minor("3")
    monkeypatch.delenv(compat.ALLOW_UNTESTED, raising=False)
    monkeypatch.setattr(compat, "TESTED_TRITON", ("0.1",))
    why = compat.untested("version 3 (Gluon)")
    assert triton.__version__ in why and "0.1" in why and "requirements/gpu.txt" in why and "TESTED_TRITON" in why
    monkeypatch.setenv(compat.ALLOW_UNTESTED, "1")
    assert compat.untested("version 3 (Gluon)") is None
    monkeypatch.delenv(compat.ALLOW_UNTESTED)
    monkeypatch.setattr(compat, "TESTED_TRITON", (compat.triton_minor(),))
    assert compat.untested("version 3 (Gluon)") is None


def test_one_tested_list_in_the_package():
    from gpulab.attention.v3 import configs, forward

    assert configs.TESTED_TRITON is compat.TESTED_TRITON is forward.TESTED_TRITON
    assert compat.TESTED_TRITON and all(compat.triton_minor(v + ".0") == v for v in compat.TESTED_TRITON)


def test_the_plan_warns_once_and_falls_back_to_version_2(monkeypatch):
    """Where the plan would take version 3 (Hopper, version 2 chosen, a head dim of V3_HEAD_DIMS) and version 3
    cannot run, the first plan warns with the reason and the fix; later plans, whatever the shape, do not; the plan
    keeps version 2."""
    from gpulab.attention import plan as P
    from gpulab.attention.v3 import forward as v3

    reason = f"version 3 (Gluon) was measured on Triton 0.1 only and this is Triton {triton.__version__}; install"
    monkeypatch.setattr(P, "check_version", lambda *a, **k: 2)
    monkeypatch.setattr(v3, "supported", lambda *a, **k: (False, reason))
    monkeypatch.setattr(compat, "_WARNED", set())
    P.clear_plan_cache()
    plans = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for n in (17, 33, 17):
            q = torch.randn(1, 2, n, 64)
            plans.append(P.forward_plan(q, q, q))
    P.clear_plan_cache()
    said = [w for w in seen if "version 3" in str(w.message)]
    assert len(said) == 1, [str(w.message) for w in seen]
    assert triton.__version__ in str(said[0].message) and "version 2 instead" in str(said[0].message)
    assert [p.version for p in plans] == [2, 2, 2]


def test_warn_once_is_per_key(monkeypatch):
    monkeypatch.setattr(compat, "_WARNED", set())
    with pytest.warns(RuntimeWarning, match="first"):
        assert compat.warn_once("a", "first")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not compat.warn_once("a", "again")
    with pytest.warns(RuntimeWarning, match="other"):
        assert compat.warn_once("b", "other")


def test_info_names_each_family_and_why():
    from gpulab import kernel_choice

    text = kernel_choice.report()
    assert triton.__version__ in text and "attention" in text and "fused RNN" in text
    rows = kernel_choice.attention_versions() + kernel_choice.rnn_versions()
    assert all(why for _, ok, why in rows if not ok)  # every "no" says why
    assert any(ok for name, ok, _ in rows if name.startswith("1 "))  # version 1 runs everywhere


def test_the_rnn_plan_warns_once_and_keeps_version_5(monkeypatch):
    """On a GPU with a Triton not measured, version 6 (Gluon) is refused with one warning; the split heads run
    version 5 as on any machine without version 6."""
    from gpulab import runtime
    from gpulab.rnn.fused import plan

    monkeypatch.setattr(runtime, "INTERPRET", False)
    monkeypatch.setattr(compat, "TESTED_TRITON", ("0.1",))
    monkeypatch.delenv(compat.ALLOW_UNTESTED, raising=False)
    monkeypatch.setattr(compat, "_WARNED", set())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert not plan.v6_applies(16, 1, 768) and not plan.v6_applies(32, 2, 512)
    said = [str(w.message) for w in seen if "version 6" in str(w.message)]
    assert len(said) == 1 and triton.__version__ in said[0] and "version 5" in said[0], said


def test_version_3_is_refused_only_on_tritons_not_measured(monkeypatch):
    """On every measured Triton the refusal on this machine is the device's (CPU tensors), not the Triton's; on one not
    measured it names the Triton found and the fix."""
    from gpulab.attention.v3 import forward as v3

    monkeypatch.delenv(compat.ALLOW_UNTESTED, raising=False)
    q = torch.zeros(1, 1, 8, 64, dtype=torch.bfloat16)
    for minor in compat.TESTED_TRITON:
        monkeypatch.setattr(compat, "triton_minor", lambda minor=minor: minor)
        ok, why = v3.supported(q, q, q)
        assert not ok and "CUDA" in why, why
    monkeypatch.setattr(compat, "triton_minor", lambda: "3.99")
    ok, why = v3.supported(q, q, q)
    assert not ok and triton.__version__ in why and "requirements/gpu.txt" in why, why


def test_the_tma_encoder_is_found_under_either_name():
    """Triton 3.7 renamed the driver's ``fill_tma_descriptor`` to ``fill_tma_descriptor_tiled`` (same arguments):
    version 3's cached launch takes whichever is there, and Triton's own launch where neither is."""

    def tiled(*args):
        return "tiled"

    def old(*args):
        return "old"

    new_only = type("U", (), {"fill_tma_descriptor_tiled": staticmethod(tiled)})
    old_only = type("U", (), {"fill_tma_descriptor": staticmethod(old)})
    both = type("U", (), {"fill_tma_descriptor_tiled": staticmethod(tiled), "fill_tma_descriptor": staticmethod(old)})
    assert compat.tma_descriptor_encoder(new_only())() == "tiled"
    assert compat.tma_descriptor_encoder(old_only())() == "old"
    assert compat.tma_descriptor_encoder(both())() == "tiled"
    assert compat.tma_descriptor_encoder(object()) is None


def test_this_tritons_driver_sets_one_of_the_encoder_names():
    """Read from the installed Triton's source (its CudaUtils is built only where CUDA is): the name it sets is one
    that :func:`gpulab.gluon_compat.tma_descriptor_encoder` looks for."""
    import inspect

    from triton.backends.nvidia import driver as nv

    source = inspect.getsource(nv.CudaUtils)
    assert any(f"self.{name} = " in source for name in compat.TMA_ENCODER_NAMES), "no known TMA encoder name"
