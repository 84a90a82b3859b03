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
