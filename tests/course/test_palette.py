"""gpulab.course.palette: one distinct style per provider, and bad input named."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from gpulab.course import palette  # noqa: E402

KEYS = {"v1", "v2", "v3", "gpulab", "fused", "split", "alternating", "vanilla", "cudnn", "sdpa-cudnn", "sdpa-flash",
        "sdpa-efficient", "sdpa-math", "flashrnn", "torch", "torch.compile", "triton", "lstm", "transformer", "model",
        "measured"}  # fmt: skip


def test_keys_are_the_agreed_ones():
    assert set(palette.PROVIDERS) == KEYS


def test_colours_markers_and_labels_are_distinct():
    styles = palette.PROVIDERS.values()
    rgb = [mcolors.to_rgb(s.color) for s in styles]
    assert len(set(rgb)) == len(rgb)
    # no two colours nearly the same: at least 0.1 apart in RGB (0..1 per channel)
    close = [(a, b) for i, a in enumerate(rgb) for b in rgb[i + 1 :] if sum((x - y) ** 2 for x, y in zip(a, b)) < 0.01]
    assert not close
    markers = [s.marker for s in styles]
    assert len(set(markers)) == len(markers)
    labels = [s.label for s in styles]
    assert len(set(labels)) == len(labels)


def test_style_gives_plot_kwargs_and_overrides():
    kw = palette.style("v3")
    assert set(kw) == {"color", "marker", "label", "linestyle"}
    assert kw["color"] == palette.color("v3") == palette.PROVIDERS["v3"].color
    kw = palette.style("cuDNN", label="cuDNN fp16", ms=3)
    assert kw["label"] == "cuDNN fp16" and kw["ms"] == 3 and kw["color"] == palette.color("cudnn")
    fig, ax = plt.subplots()
    for key in palette.PROVIDERS:
        ax.plot([1, 2], [1, 2], **palette.style(key))
        ax.scatter([1], [1], **{k: v for k, v in palette.style(key).items() if k != "linestyle"})
    fig.canvas.draw()
    labels = ax.get_legend_handles_labels()[1]
    assert sorted(labels) == sorted(2 * [s.label for s in palette.PROVIDERS.values()])
    plt.close(fig)


def test_apply_removes_offsets_and_sets_grid():
    fig, axes = plt.subplots(1, 2)
    axes[0].plot([1_000_000, 1_000_001], [5e6, 6e6])
    axes[1].plot([1, 10], [1, 100])
    axes[1].set_yscale("log")
    palette.apply(axes)
    fig.canvas.draw()
    assert axes[0].xaxis.get_offset_text().get_text() == ""
    assert axes[0].yaxis.get_offset_text().get_text() == ""
    assert all(line.get_visible() for line in axes[0].get_xgridlines())
    plt.close(fig)
    with pytest.raises(TypeError, match="ax must be a matplotlib Axes"):
        palette.apply("ax")
    with pytest.raises(TypeError, match="ax must be a matplotlib Axes"):
        palette.apply([])


def test_dodge_spreads_and_rejects_bad_indices():
    xs = [palette.dodge(10.0, i, 3) for i in range(3)]
    assert xs == sorted(xs) and len(set(xs)) == 3 and xs[1] == 10.0
    assert palette.dodge(10.0, 0, 1) == 10.0
    assert palette.dodge(100.0, 0, 2, width=0.1, log=True) == pytest.approx(95.0)
    with pytest.raises(ValueError, match="0 <= i < n"):
        palette.dodge(1.0, 3, 3)


@pytest.mark.parametrize(
    ("name", "key"),
    [("SDPA FlashAttention-2", "sdpa-flash"), ("SDPA default", "sdpa-cudnn"), ("gpulab v2", "v2"),
     ("naive (PyTorch)", "torch"), ("cuDNN nn.LSTM (dense)", "cudnn"), ("flashrnn vanilla", "flashrnn"),
     ("gpulab vanilla", "vanilla"), ("fixed-tile Triton 128x256", "triton"), ("gpulab", "gpulab")],
)  # fmt: skip
def test_key_of_maps_record_names(name, key):
    assert palette.key_of(name) == key


def test_key_of_unknown_gives_default_and_bad_type_is_named():
    assert palette.key_of("an unknown kernel") is None
    assert palette.key_of("an unknown kernel", "measured") == "measured"
    with pytest.raises(TypeError, match="name must be a str"):
        palette.key_of(None)


def test_guides_are_greys_and_unknown_guide_is_named():
    assert palette.guide("reference") == palette.GUIDES["reference"]
    assert all(len(set(mcolors.to_rgb(c))) == 1 for c in palette.GUIDES.values())
    with pytest.raises(ValueError, match="guide 'hbm' is not in"):
        palette.guide("hbm")
