"""The attention plan's choice of version 3 (``plan.V3_HEAD_DIMS``) follows the newest stored H100 run: a head dim is
listed exactly when the tuned version 3 was faster than version 2 on every problem of lesson 4's grid at that head
dim (device time, each provider's faster round). Reads committed records only (runs on CPU)."""

import pytest

from gpulab.attention import plan
from gpulab.attention.measure import v3_report as report


def test_v3_head_dims_are_where_the_newest_run_shows_v3_faster_on_every_problem():
    try:
        best = report.v3_best(report.stored_v3())
    except FileNotFoundError:
        pytest.skip("no version-3 records in this checkout")
    by_d: dict[int, list[float]] = {}
    for (_dtype, d, _causal, _seq), row in best.items():
        if report.V3_TUNED in row and "gpulab v2" in row:
            by_d.setdefault(d, []).append(row["gpulab v2"].ms / row[report.V3_TUNED].ms)
    assert set(by_d) == {64, 128}, f"the run should cover head dims 64 and 128, got {sorted(by_d)}"
    assert all(len(r) == 12 for r in by_d.values()), {d: len(r) for d, r in by_d.items()}  # 2 dtypes x 2 x 3 N
    faster_everywhere = tuple(sorted(d for d, ratios in by_d.items() if min(ratios) > 1.0))
    assert tuple(sorted(plan.V3_HEAD_DIMS)) == faster_everywhere, {d: min(r) for d, r in by_d.items()}
