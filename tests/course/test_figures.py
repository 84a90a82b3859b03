"""Every stored GPU figure can be redrawn from its records with the lesson's own plot (gpulab.course.figures)."""

import matplotlib
import pytest

from gpulab.course import figures

matplotlib.use("Agg")


@pytest.mark.parametrize("name", sorted(figures.FIGURES))
def test_every_stored_figure_redraws_from_its_records(name):
    import matplotlib.pyplot as plt

    path, fig = figures.figure(name)
    assert path.suffix == ".jsonl" and path.with_suffix(".png").exists(), f"{name}: no stored figure beside {path}"
    assert fig.axes and any(ax.has_data() for ax in fig.axes), f"{name}: the figure drew nothing"
    plt.close(fig)


def test_regenerate_writes_beside_the_records(tmp_path):
    folder = tmp_path / "05_attention_hopper" / "hopper"
    folder.mkdir(parents=True)
    src = figures.ROOT / "benchmarks" / "05_attention_hopper" / "hopper"
    newest = sorted(src.glob("*.jsonl"))[-1]
    (folder / newest.name).write_text(newest.read_text())
    (png,) = figures.regenerate(["05_attention_hopper/hopper"], root=tmp_path)
    assert png == folder / newest.with_suffix(".png").name and png.stat().st_size > 10_000
