"""One HBM ceiling (gpulab.roofline.hbm): the roofline's, with its provenance; lesson 0's plateau named apart."""

import pytest

from gpulab import bench, hardware, roofline


def test_the_ceiling_is_the_roofline_hbm_roof_with_its_source():
    c = roofline.hbm_ceiling("H100")
    roofs = roofline.ceilings("H100")
    assert c.gbps == roofs.hbm_gbps and c.source == roofs.source
    assert c.spec_gbps == hardware.spec("H100").hbm_gbps
    assert "read + write" in c.how if roofs.mode == "cuda" else "spec" in c.how
    assert f"{c.fraction:.0%}" in c.describe()


def test_a_gpu_without_records_gets_the_spec_and_says_so(tmp_path):
    c = roofline.hbm_ceiling("A100", root=tmp_path)
    assert c.gbps == hardware.spec("A100").hbm_gbps and "spec" in c.how


def test_read_plateau_takes_only_working_sets_past_l2():
    l2 = hardware.spec("H100").l2_bytes
    inside = bench.record(lesson="00", case="sweep", ms=1.0, bytes=9e12 * 1e-3, working_set_bytes=l2)
    past = bench.record(lesson="00", case="sweep", ms=1.0, bytes=3e12 * 1e-3, working_set_bytes=8 * l2)
    assert roofline.read_plateau([inside, past]).gbps == pytest.approx(3000.0)
    with pytest.raises(ValueError, match="past 4x L2"):
        roofline.read_plateau([inside])


def test_lesson2s_memory_fraction_is_the_stored_plateau_not_a_typed_constant(tmp_path):
    from gpulab import codesign

    folder = tmp_path / "00_memory_hierarchy"
    folder.mkdir()
    l2 = hardware.spec("H100").l2_bytes
    rows = [bench.record(lesson="00", case="working-set sweep", ms=1.0, bytes=b * 1e-3, working_set_bytes=w,
                         device="NVIDIA H100 80GB HBM3") for b, w in ((2.5e12, 8 * l2), (2.6e12, 16 * l2))]  # fmt: skip
    bench.save(rows, "00", path=folder / "nvidia-h100-80gb-hbm3-2030-01-01.jsonl")
    assert codesign.memory_fraction(root=tmp_path) == pytest.approx(2600.0 / hardware.spec("H100").hbm_gbps)
    assert codesign.memory_fraction(root=tmp_path / "none") == 1.0  # no record: the spec, never a typed figure
    stored = roofline.stored_read_plateau("H100")
    assert codesign.MEMORY_FRACTION == codesign.memory_fraction() == stored.fraction
    assert "00_memory_hierarchy/" in stored.source
