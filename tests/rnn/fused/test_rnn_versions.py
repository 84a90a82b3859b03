"""Lesson 5's numbered forward versions (gpulab.rnn.fused.versions): each against float64, on odd batches (two batch
tiles), T = 1 and odd T (v3's unrolled-by-two loop), fp32 and fp16 (v3's 32-bit words), outputs poisoned first."""

import pytest
import torch

from gpulab import bench, check, rnn, runtime
from gpulab.rnn.fused import plan, versions
from gpulab.rnn.fused.measure import versions_report as report


def _inputs(B, T, NH, DH, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    Wx = torch.randn(B, T, 4, NH, DH, generator=g)
    R = torch.randn(4, NH, DH, DH, generator=g) / DH**0.5
    b = torch.randn(4, NH, DH, generator=g)
    s0 = torch.randn(2, B, 1, NH, DH, generator=g)
    return tuple(t.to(runtime.device, dtype) for t in (Wx, R, b, s0))


@pytest.mark.parametrize("version", ["v1", "v2", "v3"])
@pytest.mark.parametrize("B,T,NH,DH,dtype", [(3, 3, 2, 16, torch.float32), (17, 1, 1, 32, torch.float32),
                                             (2, 4, 1, 16, torch.float16)])  # fmt: skip
def test_version_matches_float64(version, B, T, NH, DH, dtype):
    inputs = _inputs(B, T, NH, DH, dtype, seed=B + T)
    out, last = versions.run_version(version, *inputs)
    ref = rnn.flashrnn(*(t.double() for t in inputs), function="lstm", backend="vanilla")
    context = f"{version} B={B} T={T} NH={NH} DH={DH} {dtype}"
    check.assert_close(out, ref[0], dtype=dtype, name="states_all", context=context)
    check.assert_close(last, ref[1], dtype=dtype, name="states_last", context=context)


def test_v4_and_v5_are_the_package_kernels():
    inputs = _inputs(2, 2, 1, 16, torch.float32)
    ref = versions.run_version("v1", *inputs)
    for v in ("v4", "v5"):
        out, last = versions.run_version(v, *inputs)
        check.assert_close(out, ref[0], dtype=torch.float32, name=f"{v} states_all")
    assert list(versions.VERSIONS) == ["v1", "v2", "v3", "v4", "v5"] and all(versions.VERSIONS.values())


@pytest.mark.parametrize("version, NH, DH", [("b1", 2, 16), ("b2", 1, 24), ("b3", 1, 256)])
def test_backward_versions_match_float64(version, NH, DH, monkeypatch):
    # b3 runs the split backward: a head of 256 does not fit one SM
    calls = []
    split_gradients = plan.split_rnn_gradients
    monkeypatch.setattr(plan, "split_rnn_gradients", lambda *a, **k: calls.append(1) or split_gradients(*a, **k))
    plan.clear_cache()  # the loops are bound once per problem: bind them again with the counting one
    inputs = _inputs(2, 3 if version != "b3" else 1, NH, DH, torch.float32, seed=DH)
    grads = versions.run_training(version, *inputs)
    assert bool(calls) == (version == "b3")
    leaves = [t.double().requires_grad_(True) for t in inputs]
    out, _ = rnn.flashrnn(*leaves, function="lstm", backend="vanilla")
    refs = torch.autograd.grad(out.sum(), leaves)
    for name, g, ref in zip(("dWx", "dR", "db", "dstates"), grads, refs):
        check.assert_close(g, ref, dtype=torch.float32, name=name, context=version)
    assert list(versions.BACKWARD_VERSIONS) == ["b1", "b2", "b3"]
    with pytest.raises(ValueError, match="version"):
        versions.run_training("b4", *inputs)


def test_bad_input():
    inputs = _inputs(2, 2, 1, 16, torch.float32)
    with pytest.raises(ValueError, match="version"):
        versions.run_version("v9", *inputs)
    with pytest.raises(ValueError, match="power of two"):
        versions.run_version("v2", *_inputs(2, 2, 1, 24, torch.float32))
    with pytest.raises(ValueError, match=r"R must have shape \[4, 1, 16, 16\]"):
        versions.run_version("v1", inputs[0], inputs[1][:, :, :8], *inputs[2:])
    with pytest.raises(ValueError, match="LSTM"):
        versions.run_version("v1", inputs[0][:, :, :3], *inputs[1:])
    with pytest.raises(TypeError, match="states must be a torch.Tensor"):
        versions.run_version("v1", *inputs[:3], [0.0])
    with pytest.raises(ValueError, match="dtype"):
        versions.run_version("v1", inputs[0], inputs[1].double(), *inputs[2:])


def _record(version, NH, DH, ms, wall_ms, registers=100):
    return bench.Result(lesson="06", case=version, ms=ms, wall_ms=wall_ms, registers=registers, spills=0,
                        shape=[16, 1024, NH, DH], device="NVIDIA H100 80GB HBM3", date="2030-01-01",
                        params={"version": version, "NH": NH, "DH": DH})  # fmt: skip


def test_versions_report_reads_the_records(tmp_path):
    rows = [_record("v1", 12, 64, 3.0, 3.0), _record("v2", 12, 64, 1.4, 1.5), _record("v5", 1, 768, 2.5, 2.6),
            _record("cuDNN", 1, 768, 2.0, 2.1, registers=None)]  # fmt: skip
    folder = tmp_path / "06_fused_rnn" / "versions"
    folder.mkdir(parents=True)
    bench.save(rows, "06", path=folder / "nvidia-h100-80gb-hbm3-2030-01-01.jsonl")
    loaded = report.load_versions("h100", root=tmp_path)
    lines = report.versions_table(loaded).splitlines()
    assert lines[3].split()[:6] == ["v2", "12x64", "fwd", "1.400", "1.500", "2.00x"]  # 3.0 / 1.5 on the wall clock
    assert lines[4].split()[5] == "-" and lines[5].startswith("cuDNN")  # a new problem: no gain; the peer last
    assert len(report.plot_versions(loaded).patches) == 4
    # backward versions: their own pass, their gains among themselves, a second panel
    train = [_record("b1", 12, 64, 4.0, 4.0), _record("b2", 12, 64, 2.0, 2.0)]
    for r in train:
        r.params["direction"] = "forward+backward"
    lines = report.versions_table(rows + train).splitlines()
    assert lines[-2].split()[:3] == ["b1", "12x64", "fwd+bwd"] and lines[-2].split()[5] == "-"
    assert lines[-1].split()[5] == "2.00x"
    assert len(report.plot_versions(rows + train).figure.axes) == 2
    assert "v1" in report.versions_table(report.load_versions("h100"))  # the stored H100 record


def test_versions_report_bad_input(tmp_path):
    with pytest.raises(FileNotFoundError, match="bench 06 versions"):
        report.load_versions("h100", root=tmp_path)
    with pytest.raises(TypeError, match="gpu"):
        report.load_versions(3)
    with pytest.raises(TypeError, match="results"):
        report.versions_table("rows")
    with pytest.raises(ValueError, match="no version rows"):
        report.plot_versions([bench.Result(lesson="06", case="x", ms=1.0)])


def test_sass_counts_of_the_versions_read_back():
    rows = report.load_sass(64)
    assert [r["version"] for r in rows] == ["v1", "v2", "v3", "v4"]
    v3, v4 = rows[2], rows[3]
    assert v4["mufu"] < v3["mufu"] and v4["instructions"] < v3["instructions"]  # one-instruction activations
    table = report.sass_table(rows).splitlines()
    assert table[1].split()[:3] == ["version", "instr", "BAR"] and table[-1].startswith("v4")
    with pytest.raises(FileNotFoundError, match="sass versions --dh 48"):
        report.load_sass(48)
    with pytest.raises(TypeError, match="rows"):
        report.sass_table([{"dh": 64}])


def test_stall_profile_of_the_versions_reads_back(tmp_path):
    prof = report.load_profile("h100")
    assert list(prof["versions"]) == ["v1", "v2", "v3", "v4"]
    for s in prof["versions"].values():
        assert abs(sum(s["stalls"].values()) - 1) < 0.2 and s["loop_instructions"] > 0  # shares of the top reasons
    lines = report.profile_table(prof).splitlines()
    assert lines[1].split()[:3] == ["version", "long_sb", "short_sb"] and lines[-1].startswith("v4")
    with pytest.raises(FileNotFoundError, match="profile_versions.py"):
        report.load_profile("h100", root=tmp_path)
    with pytest.raises(TypeError, match="profile"):
        report.profile_table({"device": "x"})
