"""Language modelling on real text: the lesson's LSTM and Transformer as byte-level models of
:mod:`gpulab.tasks.corpus`, trained to one token budget, validated in bits per byte.

What you will learn:
- how to compare two architectures fairly on text: the same stack (:mod:`gpulab.tasks.models`: embedding, pre-LN
  blocks with a 4x MLP, head), the same depth, parameters within 5% (the one-head LSTM has 4 d^2 more recurrent
  weights per layer than the 12-head one, so it is narrowed: :func:`lstm_width`), the same optimizer, schedule and
  token budget;
- the two axes of the comparison: validation **bits per byte** against the *tokens seen* (what each model learns
  per byte of data) and against the *wall time* of training (what it learns per second of GPU);
- what the models say: 256 bytes sampled from one fixed prompt and seed (:func:`generate`).

Bytes are the tokens (vocabulary 256). :func:`build` makes one of :data:`MODELS` at a size of :data:`LM_SIZES`
(``"full"``: d 768, 2 layers, the width of the lesson's throughput table; ``"tiny"``: the CPU test size, the LSTM on
its ``vanilla`` backend and attention on its PyTorch reference, ``naive``: the fused kernels in Triton's interpreter
are too slow to train on CPU); :func:`train_lm` trains it and validates at fixed intervals of tokens. The search,
the seeds and the records: :mod:`.lm_bench`; the figure: :mod:`.lm_results`.
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F

from gpulab import dtypes, runtime
from gpulab.tasks.corpus import Corpus
from gpulab.tasks.experiments import sized
from gpulab.tasks.models import LSTMModel, TransformerModel, count_parameters
from gpulab.tasks.training import learning_rate, model_device

__all__ = [
    "VOCAB",
    "MODELS",
    "LM_SIZES",
    "PROMPT",
    "model_parameters",
    "lstm_width",
    "build",
    "bits_per_byte",
    "train_lm",
    "generate",
]

VOCAB = 256
MODELS = ("LSTM 1 head", "LSTM 12 heads", "Transformer")
"""The three contenders: the LSTM at 1 and 12 heads on gpulab's fused kernels, the Transformer (RoPE) on gpulab's
attention."""

LM_SIZES = {
    # the H200 run: d 768 (the width of the lesson's throughput table), 2 layers, 12 heads of 64; bf16
    "full": {
        "d_model": 768,
        "num_layers": 2,
        "heads": 12,
        "width_multiple": 32,
        "batch_size": 32,
        "length": 1024,
        "dtype": "bfloat16",
    },  # fmt: skip
    # tests and the CPU run: every code path in seconds
    "tiny": {
        "d_model": 48,
        "num_layers": 1,
        "heads": 12,
        "width_multiple": 4,
        "batch_size": 4,
        "length": 32,
        "dtype": "float32",
    },  # fmt: skip
}
"""Model and batch sizes: ``d_model`` (the Transformer's and the 12-head LSTM's width; the one-head LSTM's is
:func:`lstm_width`), ``num_layers``, ``heads`` (the Transformer's and the multi-head LSTM's), ``width_multiple``
(the narrowed width is a multiple of it), ``batch_size`` windows of ``length`` bytes, ``dtype``."""

_SIZE_KEYS = ("d_model", "num_layers", "heads", "width_multiple", "batch_size", "length", "dtype")

PROMPT = b"The Python interpreter "
"""The fixed prompt every model continues (:func:`generate`)."""


def sizes(size) -> dict:
    """``size`` as a dict: a name in :data:`LM_SIZES` (None: 'full' on a GPU, 'tiny' on CPU) or a dict with every
    key of ``LM_SIZES['tiny']``."""
    return sized(size, LM_SIZES, _SIZE_KEYS, "gpulab.tasks.lm.LM_SIZES['tiny']")


def model_parameters(model: str, d_model: int, num_layers: int, heads: int = 12, vocab: int = VOCAB) -> int:
    """Trainable parameters of ``model`` (one of :data:`MODELS`) at width ``d_model``, counted from the stack's
    layers (the same count as :func:`gpulab.tasks.count_parameters` of the built model): embedding and head
    ``2 V d + V``, final LayerNorm ``2d``; per layer two LayerNorms ``4d``, the MLP ``8 d^2 + 5d``, and the mixer:
    attention ``4 d^2 + 4d``, an LSTM of NH heads ``4 d^2 + 4 d^2 / NH + 4d`` (one head: ``+ 8d``, nn.LSTM's two
    biases, ``bias_ih`` and ``bias_hh``)."""
    runtime.one_of("model", model, MODELS)
    d, n = runtime.positive_int("d_model", d_model), runtime.positive_int("num_layers", num_layers)
    v = runtime.positive_int("vocab", vocab)
    nh = 1 if model == "LSTM 1 head" else runtime.positive_int("heads", heads)
    if model == "Transformer":
        mixer = 4 * d * d + 4 * d
    else:
        mixer = 4 * d * d + 4 * d * d // nh + (8 if nh == 1 else 4) * d
    return 2 * v * d + v + 2 * d + n * (4 * d + 8 * d * d + 5 * d + mixer)


def lstm_width(d_model: int, num_layers: int, heads: int = 12, multiple: int = 32, vocab: int = VOCAB) -> int:
    """The one-head LSTM's width: the multiple of ``multiple`` whose parameter count is nearest the Transformer's
    at ``d_model`` (about ``d_model * sqrt(3/4)`` when the layers dominate: 16 d^2 per layer against 12 d^2)."""
    multiple = runtime.positive_int("multiple", multiple)
    target = model_parameters("Transformer", d_model, num_layers, heads, vocab)
    widths = range(multiple, d_model + multiple, multiple)
    return min(widths, key=lambda w: abs(model_parameters("LSTM 1 head", w, num_layers, heads, vocab) - target))


def _lstm_warm_up(model, batch_size: int, length: int) -> None:
    """One forward and backward at the training shape: raises where the kernels cannot run it, and compiles them."""
    x = torch.randint(0, VOCAB, (batch_size, length), generator=torch.Generator().manual_seed(0))
    x = x.to(model_device(model))
    model(x).float().sum().backward()
    model.zero_grad(set_to_none=True)


def build(model: str, size=None, seed: int = 0, device=None) -> tuple[torch.nn.Module, dict]:
    """One of :data:`MODELS` at ``size`` (:data:`LM_SIZES`), seeded (the same weights on every machine), on
    ``device`` in the size's dtype. Returns ``(module, info)``: ``info`` holds ``d_model``, ``num_heads``,
    ``num_layers``, ``parameters`` and the LSTM's ``backend`` or the Transformer's ``attention``. On a GPU the LSTM
    runs the ``fused`` backend; where the fused kernel refuses a head size it runs ``alternating`` and ``info['note']``
    says why."""
    runtime.one_of("model", model, MODELS)
    cfg, seed = sizes(size), runtime.integer("seed", seed)
    d, n, heads = cfg["d_model"], cfg["num_layers"], cfg["heads"]
    dtype = dtypes.as_dtype(cfg["dtype"])
    torch.manual_seed(seed)
    info = {"num_layers": n}
    if model == "Transformer":
        m = TransformerModel(VOCAB, VOCAB, d_model=d, num_heads=heads, num_layers=n)
        info.update(d_model=d, num_heads=heads, attention=m.blocks[0].mixer.attention)
    else:
        nh = 1 if model == "LSTM 1 head" else heads
        width = lstm_width(d, n, heads, cfg["width_multiple"]) if nh == 1 else d
        m = LSTMModel(VOCAB, VOCAB, d_model=width, num_heads=nh, num_layers=n)
        info.update(d_model=width, num_heads=nh, backend=m.backend)
    m = m.to(device=device or runtime.device, dtype=dtype)
    if model != "Transformer" and m.backend == "fused":
        try:
            _lstm_warm_up(m, cfg["batch_size"], cfg["length"])
        except Exception as exc:  # noqa: BLE001 - the tile chooser's ValueError, or a compiler's resource error
            for block in m.blocks:
                block.mixer.backend = "alternating"
            _lstm_warm_up(m, cfg["batch_size"], cfg["length"])
            info.update(backend="alternating", note=f"fused refused ({str(exc).splitlines()[0][:200]})")
    if info.get("backend") == "fused":
        info.update(_fused_plan(cfg["batch_size"], info["num_heads"], info["d_model"] // info["num_heads"], dtype))
    info["parameters"] = count_parameters(m)
    return m, info


def _fused_plan(batch: int, num_heads: int, head_dim: int, dtype) -> dict:
    """What the ``fused`` backend runs for the training shape (:func:`gpulab.rnn.fused.plan.choose`), and whether the
    Gluon split kernels (version 6) apply: for the records, beside the throughput they explain."""
    from gpulab.rnn.fused import plan  # the one chooser of the family; imported only where a GPU runs it

    try:
        p = plan.choose(batch, num_heads, head_dim, dtype=dtype, training=True)
        out = {"plan": p.kind, "plan_why": p.why}
        if p.kind == "split":
            out["split_v6"] = bool(plan.v6_applies(batch, num_heads, head_dim, dtype=dtype))
        return out
    except Exception as exc:  # noqa: BLE001 - a description only; the training itself has run its warm-up
        return {"plan": f"unknown ({type(exc).__name__}: {str(exc)[:200]})"}


def _require(model, corpus) -> None:
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (from gpulab.tasks.lm.build), got {type(model).__name__}.")
    if corpus is not None and not isinstance(corpus, Corpus):
        raise TypeError(f"corpus must be a gpulab.tasks.corpus.Corpus (corpus.load() or corpus.cpu_slice()), got "
                        f"{type(corpus).__name__}.")  # fmt: skip


def bits_per_byte(model: torch.nn.Module, corpus: Corpus, windows: int, length: int, batch_size: int) -> float:
    """Mean cross-entropy in bits of every next byte of ``windows`` fixed validation windows of ``length`` bytes
    (:meth:`Corpus.windows`: evenly spaced over the validation split), in batches of ``batch_size``; eval mode, no
    gradients, the model's mode restored."""
    windows, batch_size = runtime.positive_int("windows", windows), runtime.positive_int("batch_size", batch_size)
    _require(model, corpus)
    x, y = corpus.windows(windows, length, "validation", device=model_device(model))
    was_training, total = model.training, 0.0
    model.eval()
    try:
        with torch.no_grad():
            for i in range(0, windows, batch_size):
                logits = model(x[i : i + batch_size]).float()
                total += float(F.cross_entropy(logits.reshape(-1, VOCAB), y[i : i + batch_size].reshape(-1),
                                               reduction="sum"))  # fmt: skip
    finally:
        model.train(was_training)
    return total / (y.numel() * math.log(2))


def train_lm(
    model: torch.nn.Module,
    corpus: Corpus,
    *,
    tokens: int,
    batch_size: int,
    length: int,
    lr: float,
    warmup: int,
    seed: int,
    eval_every: int,
    val_windows: int,
    weight_decay: float = 0.1,
    clip: float = 1.0,
    progress=None,
) -> dict:
    """Train ``model`` on ``corpus``'s train split with AdamW (betas 0.9, 0.95) on a cosine schedule after
    ``warmup`` steps, for ``ceil(tokens / (batch_size * length))`` steps of ``batch_size`` random windows (drawn
    from a generator seeded with ``seed``); every ``eval_every`` tokens and at the end, :func:`bits_per_byte` on
    ``val_windows`` validation windows. The clock counts training only (synchronized before each reading; the
    validations are left out of it).

    Returns ``{"curve": [{"tokens", "seconds", "val_bpb"}, ...], "steps", "tokens", "seconds", "device_seconds"
    (CUDA events around the same segments; NaN on CPU), "tokens_per_s" (from ``seconds``),
    "final_loss", "val_bpb"}`` (``final_loss``: the training batch's loss at the last validation, nats per byte; the
    loss is read only there, so the host does not wait for the GPU every step; ``val_bpb`` NaN and the curve cut
    short when that loss is no longer finite)."""
    tokens, eval_every = runtime.positive_int("tokens", tokens), runtime.positive_int("eval_every", eval_every)
    batch_size, length = runtime.positive_int("batch_size", batch_size), runtime.positive_int("length", length)
    lr, warmup = runtime.finite_float("lr", lr, positive=True), runtime.nonnegative_int("warmup", warmup)
    _require(model, corpus)
    per_step = batch_size * length
    steps = -(-tokens // per_step)
    device, gen = model_device(model), torch.Generator().manual_seed(runtime.integer("seed", seed))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay, foreach=True)
    model.train()
    losses, curve, seconds, next_eval = [], [], 0.0, eval_every

    def validate(seen):
        curve.append({"tokens": seen, "seconds": seconds,
                      "val_bpb": bits_per_byte(model, corpus, val_windows, length, batch_size)})  # fmt: skip

    events = torch.cuda.is_available() and device.type == "cuda"  # device time too: CUDA events per segment
    device_ms = 0.0

    def mark():
        if not events:
            return None
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    runtime.synchronize()
    t0, e0 = time.perf_counter(), mark()
    loop = progress(range(steps)) if progress is not None else range(steps)
    for step in loop:
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, steps, lr, "cosine", warmup)
        x, y = corpus.batch(batch_size, length, gen, "train", device)
        logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        seen = (step + 1) * per_step
        if seen >= next_eval or step == steps - 1:
            losses.append(loss.item())  # a sync; only at validations, so the host runs ahead in between
            e1 = mark()
            runtime.synchronize()
            seconds += time.perf_counter() - t0
            device_ms += e0.elapsed_time(e1) if events else 0.0
            if not math.isfinite(losses[-1]):
                break
            validate(seen)
            while next_eval <= seen:
                next_eval += eval_every
            t0, e0 = time.perf_counter(), mark()
    diverged = not losses or not math.isfinite(losses[-1])
    return {
        "curve": curve,
        "steps": step + 1,
        "tokens": seen,
        "seconds": seconds,
        "device_seconds": device_ms / 1e3 if events else float("nan"),
        "tokens_per_s": seen / seconds if seconds > 0 else float("nan"),
        "final_loss": losses[-1] if losses else float("nan"),
        "val_bpb": float("nan") if diverged else curve[-1]["val_bpb"],
    }


def generate(model: torch.nn.Module, prompt: bytes = PROMPT, count: int = 256, seed: int = 0,
             temperature: float = 0.8, context: int = 1024) -> bytes:  # fmt: skip
    """``count`` bytes sampled from ``model`` after ``prompt``, one at a time (each from the softmax of the last
    logits over ``temperature``, drawn by a CPU generator seeded with ``seed``: the same bytes for the same weights
    on any device), the model reading at most the last ``context`` bytes. Eval mode, no gradients."""
    if not isinstance(prompt, bytes) or not prompt:
        raise TypeError(f"prompt must be non-empty bytes, e.g. {PROMPT!r}; got {type(prompt).__name__} {prompt!r}.")
    count, context = runtime.positive_int("count", count), runtime.positive_int("context", context)
    _require(model, None)
    temperature = runtime.finite_float("temperature", temperature, positive=True)
    gen, out = torch.Generator().manual_seed(runtime.integer("seed", seed)), list(prompt)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for _ in range(count):
                x = torch.tensor([out[-context:]], dtype=torch.int64, device=model_device(model))
                p = torch.softmax(model(x)[0, -1].float().cpu() / temperature, -1)
                out.append(int(torch.multinomial(p, 1, generator=gen)))
    finally:
        model.train(was_training)
    return bytes(out[len(prompt) :])
