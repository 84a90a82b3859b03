"""Reading lesson 8's records: the accuracy and throughput tables, the summary against the FlashRNN article, and the
figures. Everything here takes a list of :class:`gpulab.bench.Result` (live from :mod:`.experiments` or loaded with
:func:`gpulab.bench.load`) and computes nothing new.
"""

from __future__ import annotations

from gpulab import bench, runtime
from gpulab.course import palette
from gpulab.tasks.data import get_task

__all__ = [
    "MODELS",
    "ARTICLE_RATIO",
    "accuracy_records",
    "throughput_records",
    "throughput_floors",
    "throughput_bound",
    "accuracy_table",
    "throughput_table",
    "throughput_summary",
    "stored_throughput",
    "stored_rope",
    "plot_accuracy",
    "plot_throughput",
    "figure",
]

MODELS = ("LSTM", "Transformer")


def _results(results) -> list:
    """``results`` as a list of :class:`gpulab.bench.Result`; else a TypeError naming it."""
    where = " (from tasks.compare/throughput or bench.load)"
    return bench.result_list("results", results, allow_empty=True, source=where)


def accuracy_records(results) -> list[bench.Result]:
    """The accuracy records of ``results`` that did not fail."""
    return [r for r in _results(results) if r.params.get("kind") == "accuracy" and "error" not in r.params]


def throughput_records(results) -> list[bench.Result]:
    """The throughput records of ``results`` that did not fail."""
    return [r for r in _results(results) if r.params.get("kind") == "throughput" and "error" not in r.params]


def throughput_floors(results) -> dict:
    """The floor records of ``results`` by the model they stand under: ``{"LSTM": Result, "Transformer": Result}``
    (:class:`gpulab.tasks.models.FloorModel`, each stack without its recurrence or attention; runs before
    2026-11-28 have none: {})."""
    return {r.params["like"]: r for r in throughput_records(results) if r.params.get("model") == "floor"}


_SDPA = "Transformer 12 heads (sdpa)"


def throughput_bound(results, baseline: str = _SDPA) -> dict | None:
    """What the floors say about the LSTM's ratios to ``baseline`` (a case of ``results``), on the eager wall clock:
    ``T`` the baseline's step, ``FL`` and ``FT`` the floors' (:class:`gpulab.tasks.models.FloorModel`), ``L`` the
    LSTM's step per head count, ``rec`` its recurrence's share (``L - FL``), ``attention`` the baseline's (``T -
    FT``), ``bound`` = T / FL (the LSTM's tokens/s ratio to the baseline with a recurrence that took no time;
    a ratio rho leaves its recurrent layers T / rho - FL a step), ``peer`` the ``torch.nn.LSTM`` stack's step and
    ``peer_dtype`` the dtype its recurrences ran in (None if the run has none). None when ``results`` lack the
    baseline, the floors or the LSTM."""
    if not isinstance(baseline, str) or not baseline:
        raise runtime.ArgumentTypeError(f"baseline must be a throughput case such as {_SDPA!r}, got {baseline!r}.")
    recs = throughput_records(results)
    floors = throughput_floors(recs)
    base = next((r for r in recs if r.case == baseline), None)
    walls = {r.params["num_heads"]: r.wall_ms for r in recs if r.params["model"] == "LSTM" and r.wall_ms}
    if base is None or not base.wall_ms or len(floors) < 2 or not walls:
        return None
    T, FL, FT = base.wall_ms, floors["LSTM"].wall_ms, floors["Transformer"].wall_ms
    peer = next((r for r in recs if r.params["model"] == "torch LSTM"), None)
    return {"T": T, "FL": FL, "FT": FT, "L": walls, "rec": {h: w - FL for h, w in walls.items()}, "attention": T - FT,
            "bound": T / FL, "peer": peer.wall_ms if peer else None,
            "peer_dtype": peer.params.get("recurrence_dtype", peer.dtype) if peer else None}  # fmt: skip


def accuracy_table(results) -> str:
    """Accuracy (%) of the final state per task and model (rows) and test length (columns)."""
    recs = accuracy_records(results)
    lengths = sorted({r.params["test_length"] for r in recs})
    rows = {}
    for r in recs:
        rows.setdefault((r.params["task"], r.params["model"]), {})[r.params["test_length"]] = r.params["accuracy"]
    first = ["task / model (params, train length, steps)"] + [str(n) for n in lengths]
    lines = []
    for (task, model), accs in rows.items():
        r = next(x for x in recs if x.params["task"] == task and x.params["model"] == model)
        label = f"{task} {model} ({r.params['parameters']:,}, {r.params['train_length']}, {r.params['steps']})"
        lines.append([label] + [f"{100 * accs[n]:.1f}" if n in accs else "-" for n in lengths])
    widths = [max(len(row[i]) for row in [first, *lines]) for i in range(len(first))]
    fmt = lambda row: "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths)))
    return "\n".join([fmt(first), fmt(["-" * w for w in widths]), *map(fmt, lines)])


def _reference(recs, heads: int = 12):
    """The Transformer (not the SDPA peer) with ``heads`` heads, else the fastest; None if there is none."""
    flash = [r for r in recs if r.params["model"] == "Transformer" and r.params.get("attention") != "sdpa"]
    same = [r for r in flash if r.params["num_heads"] == heads]
    return same[0] if same else max(flash, key=lambda r: r.params["tokens_per_s"], default=None)


def throughput_table(results) -> str:
    """Tokens/s per model and head count on both clocks, with the ratio to the reference Transformer (12 heads, else
    the fastest one; not the SDPA peer): ``ms/step`` and ``tokens/s`` are device time, ``wall ms`` the eager wall time
    per training step (steps back to back) and ``x (wall)`` the ratio of tokens/s on that clock, the one a training
    loop gets."""
    recs = throughput_records(results)
    if not recs:
        return "no throughput records"
    ref = _reference(recs)
    best = ref.params["tokens_per_s"] if ref is not None else None
    ref_wall = ref.wall_ms if ref is not None else None
    w = max(28, *(len(r.case) for r in recs))
    lines = [
        f"{'case':{w}s} {'backend':12s} {'params':>11s} {'ms/step':>9s} {'tokens/s':>12s} {'vs Transformer':>15s} "
        f"{'wall ms':>9s} {'x (wall)':>9s}"
    ]
    for r in recs:
        backend = r.params.get("backend") or r.params.get("attention") or ""
        ratio = f"{r.params['tokens_per_s'] / best:.2f}x" if best else "-"
        wall, wall_ratio = "-", "-"
        if r.wall_ms:
            wall = f"{r.wall_ms:.2f}"
            if ref_wall:  # same tokens per step for every model: tokens/s ratios are inverse step-time ratios
                tokens = r.params["tokens_per_s"] * r.ms / ref.params["tokens_per_s"] / ref.ms
                wall_ratio = f"{tokens * ref_wall / r.wall_ms:.2f}x"
        lines.append(
            f"{r.case:{w}s} {backend:12s} {r.params['parameters']:>11,} {r.ms:>9.2f} "
            f"{r.params['tokens_per_s']:>12,.0f} {ratio:>15s} {wall:>9s} {wall_ratio:>9s}"
        )
    return "\n".join(lines)


def stored_throughput(gpu: str = "h100", root=None) -> list:
    """The stored training-throughput records of ``gpu``: the newest by date (:func:`gpulab.bench.newest`) of the
    re-measurements under ``benchmarks/08_state_tracking/throughput/`` (``python -m gpulab bench 08 throughput``) and
    the lesson's own runs (their throughput rows); [] when neither exists."""
    if not isinstance(gpu, str) or not gpu:
        raise runtime.ArgumentTypeError(f"gpu must be a GPU name such as 'h100', got {gpu!r}.")
    folder = bench.results_dir(root) / "08_state_tracking"
    files = bench.record_files(folder / "throughput", gpu) + bench.record_files(folder, gpu)
    return throughput_records(bench.load("08", path=bench.newest(files))) if files else []


def stored_rope(gpu: str = "h100", root=None) -> list:
    """The current rope record on ``gpu`` (``benchmarks/08_state_tracking/rope/``): the
    Transformer's heads split and rotated by the Triton kernel and by PyTorch's operations, forward and
    forward+backward, both clocks; [] when there is none."""
    if not isinstance(gpu, str) or not gpu:
        raise runtime.ArgumentTypeError(f"gpu must be a GPU name such as 'h100', got {gpu!r}.")
    files = bench.record_files(bench.results_dir(root) / "08_state_tracking" / "rope", gpu)
    return bench.load("08", path=bench.newest(files, part="rope")) if files else []


ARTICLE_RATIO = {1: 0.6, 12: 0.75}
"""FlashRNN (Pöppel et al., 2024) on 8 H100s: the LSTM's training throughput relative to a Transformer's, ~40%
slower with one head and ~25% slower with 12 heads."""


def throughput_summary(results, reference_heads: int = 12) -> list[str]:
    """One line per LSTM head count: its tokens/s relative to the FlashAttention Transformer with
    ``reference_heads`` heads (else the fastest one), beside the article's ratio where it gives one."""
    reference_heads = runtime.positive_int("reference_heads", reference_heads)
    recs = throughput_records(results)
    ref = _reference(recs, reference_heads)
    if ref is None:
        return ["no Transformer throughput to compare with"]
    lines = [f"reference: {ref.case}, {ref.params['tokens_per_s']:,.0f} tokens/s"]
    for r in recs:
        if r.params["model"] != "LSTM":
            continue
        heads, ratio = r.params["num_heads"], r.params["tokens_per_s"] / ref.params["tokens_per_s"]
        clocks = "device time"
        if r.wall_ms and ref.wall_ms:  # the same tokens per step for both: tokens/s ratio = inverse step-time ratio
            clocks += f"; {ratio * r.ms / r.wall_ms * ref.wall_ms / ref.ms:.2f}x on the eager wall clock"
        article = f"; FlashRNN article: ~{ARTICLE_RATIO[heads]:.2f}x" if heads in ARTICLE_RATIO else ""
        lines.append(
            f"{r.case} ({r.params.get('backend', '?')}): {ratio:.2f}x the Transformer's tokens/s ({clocks}{article})"
        )
    return lines


def plot_accuracy(results, axes=None, title=None):
    """One panel per task: accuracy of the final state vs test length, one line per model, the training length
    dashed, chance dotted. Returns the axes."""
    import matplotlib.pyplot as plt

    recs = accuracy_records(results)
    tasks = list(dict.fromkeys(r.params["task"] for r in recs))
    if axes is None:
        _, axes = plt.subplots(1, max(1, len(tasks)), figsize=(5.5 * max(1, len(tasks)), 3.8), squeeze=False)
        axes = axes[0]
    for ax, task in zip(axes, tasks):
        for model in MODELS:
            rs = sorted(
                (r for r in recs if r.params["task"] == task and r.params["model"] == model),
                key=lambda r: r.params["test_length"],
            )
            if rs:
                ax.plot(
                    [r.params["test_length"] for r in rs],
                    [100 * r.params["accuracy"] for r in rs],
                    **palette.style(
                        palette.key_of(model, "gpulab"), label=f"{model} ({rs[0].params['parameters']:,} params)"
                    ),
                )
        train_len = next(r.params["train_length"] for r in recs if r.params["task"] == task)
        ref = palette.guide("reference")
        ax.axvline(train_len, color=ref, ls="--", lw=1, label=f"training length {train_len}")
        ax.axhline(100 / get_task(task).classes, color=ref, ls=":", lw=1, label="chance")
        ax.set_xscale("log", base=2)
        tested = sorted({r.params["test_length"] for r in recs if r.params["task"] == task})
        ax.set_xticks(tested, [str(n) for n in tested])  # ticks at the tested lengths, not at powers of two
        ax.minorticks_off()
        ax.set_ylim(0, 105)
        ax.set_xlabel("test length (tokens)")
        ax.set_ylabel("final-state accuracy (%)")
        ax.set_title(f"{get_task(task).description}" if title is None else title)
        palette.apply(ax)
        ax.legend(fontsize=8, loc="lower left")
    return axes


def plot_throughput(results, ax=None, title=None):
    """Bar chart of training tokens/s (millions) per model and head count in the palette's colours: the LSTM (gpulab's
    kernels) and its ``torch.nn.LSTM`` peer (cuDNN's), the Transformer (gpulab's attention) and its SDPA peer
    (hatched), the floors without sequence mixing grey."""
    import matplotlib.pyplot as plt

    recs = throughput_records(results)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(5, 0.9 * len(recs) + 2), 3.8))
    labels = [r.case + (f"\n{r.params['backend']}" if r.params["model"] == "LSTM" else "") for r in recs]
    named = set()
    for i, r in enumerate(recs):
        kind = _bar_kind(r)
        color = palette.guide("faint") if kind[0] is None else palette.color(kind[0])
        ax.bar(i, r.params["tokens_per_s"] / 1e6, color=color, hatch=kind[1], edgecolor=palette.guide("reference"),
               label=None if kind in named else kind[2])  # fmt: skip
        named.add(kind)
    ax.set_xticks(range(len(recs)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("training tokens / s (millions)")
    ax.legend(fontsize=7)
    if recs:
        r = recs[0]
        ax.set_title(
            title
            or f"train step, d={r.params['d_model']}, {r.params['num_layers']} layers, "
            f"B x T = {r.shape[0]} x {r.shape[1]}, {r.dtype}"
        )
    palette.apply(ax)
    ax.grid(False, axis="x")
    return ax


def _bar_kind(r) -> tuple:
    """(palette key or None for grey, hatch, legend label) of one throughput record's bar."""
    model = r.params["model"]
    if model == "floor":
        return (None, None, "floor: no sequence mixing")
    if model == "torch LSTM":
        return ("cudnn", None, "LSTM, torch.nn.LSTM (cuDNN)")
    if model == "LSTM":
        return ("lstm", None, f"LSTM, gpulab {r.params.get('backend') or ''}".rstrip())
    sdpa = r.params.get("attention") == "sdpa"
    return ("transformer", "//" if sdpa else None, "Transformer, SDPA" if sdpa else "Transformer, gpulab attention")


def figure(results):
    """The result figure: accuracy vs length per task, and the throughput bars."""
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(r.params["task"] for r in accuracy_records(results))) or ["-"]
    fig, axes = plt.subplots(1, len(tasks) + 1, figsize=(5.5 * (len(tasks) + 1), 4.2))
    plot_accuracy(results, axes=axes[: len(tasks)])
    plot_throughput(results, ax=axes[-1])
    fig.tight_layout()
    return fig
