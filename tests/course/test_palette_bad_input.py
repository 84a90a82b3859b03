"""Bad input to gpulab.course.palette (and bench.plots.series_styles) is named: the argument, the value, what is
allowed."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from gpulab.bench.plots import series_styles  # noqa: E402
from gpulab.course import palette  # noqa: E402

CASES = [
    (palette.style, ("cuddn",), ValueError, r"provider 'cuddn' is not in .*known keys: .*cudnn"),
    (palette.style, ("",), ValueError, r"provider '' is not in .*known keys"),
    (palette.style, (3,), TypeError, r"provider must be a str.*got int 3"),
    (palette.color, ("sdpa",), ValueError, r"provider 'sdpa' is not in .*sdpa-flash"),
    (palette.color, (None,), TypeError, r"provider must be a str"),
    (palette.apply, ("ax",), TypeError, r"ax must be a matplotlib Axes"),
    (palette.apply, ([],), TypeError, r"ax must be a matplotlib Axes"),
    (palette.dodge, (1.0, 3, 3), ValueError, r"0 <= i < n.*i=3, n=3"),
    (palette.dodge, (1.0, 0, 0), ValueError, r"0 <= i < n.*n=0"),
    (palette.key_of, (None,), TypeError, r"name must be a str.*NoneType"),
    (palette.guide, ("hbm",), ValueError, r"guide 'hbm' is not in .*HBM"),
    (palette.Style, ("#000000",), TypeError, r"marker"),  # a Style needs a colour, a marker and a label
    (series_styles, ("v1",), TypeError, r"names must be an iterable of series names.*str 'v1'"),
    (series_styles, (None,), TypeError, r"names must be an iterable"),
]


@pytest.mark.parametrize(("fn", "args", "exc", "match"), CASES, ids=[f"{c[0].__name__}-{c[1]!r}" for c in CASES])
def test_bad_input_is_named(fn, args, exc, match):
    with pytest.raises(exc, match=match):
        fn(*args)


def test_series_styles_keeps_lines_apart():
    styles = series_styles(["gpulab", "gpulab (autotuned)", "something", "else", "SDPA default"])
    looks = {(s["color"], s["marker"], s["linestyle"]) for s in styles.values()}
    assert len(looks) == 5
    assert styles["SDPA default"]["color"] == palette.color("sdpa-cudnn")
    assert styles["gpulab"] == palette.style("gpulab")
