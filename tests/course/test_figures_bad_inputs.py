"""Bad input to gpulab.course.figures: a clear error naming what is known."""

import pytest

from gpulab.course import figures


def test_unknown_figure_is_refused_with_the_known_names():
    with pytest.raises(ValueError, match="05_attention_hopper/hopper"):
        figures.figure("04_attn")


def test_empty_folder_is_refused(tmp_path):
    (tmp_path / "00_memory_hierarchy").mkdir()
    with pytest.raises(FileNotFoundError, match="no records"):
        figures.figure("00_memory_hierarchy", root=tmp_path)
    with pytest.raises(FileNotFoundError, match="no records"):
        figures.regenerate(["00_memory_hierarchy"], root=tmp_path)
