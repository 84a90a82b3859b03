"""Compile the fused RNN kernels for sm_90 without a GPU and count the instructions of their time loop.

    python -m gpulab.rnn.fused.measure.sass [forward|backward|both] [--save-gates] [--dh 64] [--warps 8] [--dump DIR]

Triton compiles for a target it is told about (``GPUTarget("cuda", 90, 32)``) without a driver, and its bundled
``cuobjdump`` disassembles the cubin: so the SASS of a kernel's time loop (its instruction mix, barriers, loads and
stores per step) can be read on a laptop, before any GPU time is spent. Numbers from here are instruction counts,
not timings.

A kernel can only be compiled if gpulab decided for compiled kernels when it was imported (no interpreter). On a
machine without a GPU, :func:`main` (and :func:`run_offline`, which tests use) therefore runs the probe in a fresh
Python process that tells gpulab a GPU is present before importing it; nothing is launched there.
"""

from __future__ import annotations

import argparse
import collections
import inspect
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget

from gpulab import dtypes, runtime
from gpulab.rnn.fused import versions
from gpulab.rnn.fused.plan import KERNELS
from gpulab.rnn.fused.tiling import fused_tiling

__all__ = [
    "compile_kernel",
    "forward",
    "backward",
    "version",
    "version_stats",
    "v6_stats",
    "b4_stats",
    "units_stats",
    "shared_bytes",
    "loop_stats",
    "report",
    "main",
    "run_offline",
    "kwidths",
]

# Run in the fresh process: claim a GPU before gpulab decides (kernels are compiled, never launched), then probe.
_BOOTSTRAP = (
    "import sys, torch; torch.cuda.is_available = lambda: True; "
    "from gpulab.rnn.fused.measure import sass; sys.exit(sass.main(sys.argv[1:]))"
)

BIN = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


_DTYPES = ("bf16", "fp16", "fp32")


def _warps(name: str, value) -> int:
    value = runtime.positive_int(name, value)
    if value & (value - 1) or value > 32:
        raise ValueError(f"{name}={value} is not a warp count Triton compiles; use 1, 2, 4, 8, 16 or 32.")
    return value


def _mapping(name: str, value) -> dict:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise runtime.ArgumentTypeError(
            f"{name} must be a dict from parameter names (str) to values, got {type(value).__name__} {value!r:.60}."
        )
    return value


def _compiled(kernel, name, dump) -> None:
    if not isinstance(getattr(kernel, "asm", None), dict) or "cubin" not in kernel.asm:
        raise runtime.ArgumentTypeError(
            f"kernel must be a compiled kernel with a cubin (from compile_kernel, forward or backward), got "
            f"{type(kernel).__name__}."
        )
    if not isinstance(name, str) or not re.fullmatch(r"[\w.+-]+", name):
        raise ValueError(
            f"name={name!r} must be a file-name-safe label such as 'forward_dh64_w8' (letters, digits, _.-+)."
        )
    if dump is not None and not isinstance(dump, (str, os.PathLike)):
        raise runtime.ArgumentTypeError(f"dump must be a folder path (str or Path) or None, got {type(dump).__name__}.")


def compile_kernel(fn, signature, constexprs, num_warps, unaligned=("NH", "T0", "T1")):
    """As a launch would: pointers 16-byte aligned, integers divisible by 16 except those named in ``unaligned``."""
    if not hasattr(fn, "fn") or not inspect.isfunction(fn.fn):
        raise runtime.ArgumentTypeError(f"fn must be a @triton.jit kernel, got {type(fn).__name__} {fn!r:.60}.")
    signature, constexprs = _mapping("signature", signature), _mapping("constexprs", constexprs)
    num_warps = _warps("num_warps", num_warps)
    if isinstance(unaligned, str) or not all(isinstance(u, str) for u in unaligned):
        raise runtime.ArgumentTypeError(
            f"unaligned must be a tuple of parameter names, got {unaligned!r}; e.g. ('NH',)."
        )
    for name, prm in inspect.signature(fn.fn).parameters.items():  # constexpr defaults, as a launch applies them
        if prm.default is not inspect.Parameter.empty and name not in signature:
            signature[name] = "constexpr"
            constexprs[name] = prm.default
    names = list(signature)
    attrs = {(names.index(k),): [["tt.divisibility", 16]] for k, v in signature.items()
             if v != "constexpr" and k not in unaligned}  # fmt: skip
    src = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps, "num_stages": 1})


def forward(dh, warps, save_gates, dtype="bf16", **extra):
    """The fused forward kernel compiled for sm_90 at head dim ``dh`` with ``warps`` warps (LSTM, BLOCK_B=16);
    ``extra`` overrides constexprs."""
    dh, warps = runtime.positive_int("dh", dh), _warps("warps", warps)
    save_gates = runtime.strict_bool("save_gates", save_gates)
    runtime.one_of("dtype", dtype, _DTYPES)
    sig = {n: f"*{dtype}" for n in ("wx_ptr", "r_ptr", "b_ptr", "s0_ptr", "out_ptr", "last_ptr", "gates_ptr")}
    sig.update({n: "i32" for n in ("B", "T", "NH", "state_stride")})
    const = dict(FUNCTION=0, G_W=4, G_R=4, G_B=4, DH=dh, BLOCK_B=16, BLOCK_D=max(16, triton.next_power_of_2(dh)),
                 SAVE_GATES=save_gates, R_ON_CHIP=True, FAST=dtype == "bf16", IS_FP32=dtype == "fp32",
                 PRECISION="ieee")  # fmt: skip
    const.update(extra)
    sig.update({k: "constexpr" for k in const})
    return compile_kernel(KERNELS["forward"], sig, const, warps)


def backward(dh, warps, dtype="bf16", **extra):
    """The fused backward kernel compiled for sm_90 at head dim ``dh`` with ``warps`` warps; ``extra`` overrides
    constexprs (the environment's FN, GR, GB pick the function: FN=2 GR=1 GB=1 is the Elman cell)."""
    dh, warps = runtime.positive_int("dh", dh), _warps("warps", warps)
    runtime.one_of("dtype", dtype, _DTYPES)
    names = ("gates_ptr", "out_ptr", "s0_ptr", "r_ptr", "dout_ptr", "dlast_ptr", "dg_ptr", "ds0_ptr")
    sig = {n: f"*{dtype}" for n in names}
    sig.update({n: "i32" for n in ("B", "T", "T0", "T1", "NH", "state_stride")})
    fn, gr, gb = (int(os.environ.get(k, v)) for k, v in (("FN", 0), ("GR", 4), ("GB", 4)))  # FN=2 GR=1 GB=1: elman
    const = dict(FUNCTION=fn, G_R=gr, G_B=gb, DH=dh, BLOCK_B=16, BLOCK_D=max(16, triton.next_power_of_2(dh)),
                 R_ON_CHIP=True, HAS_DLAST=True, FAST=dtype == "bf16", IS_FP32=dtype == "fp32",
                 PRECISION="ieee")  # fmt: skip
    const.update(extra)
    sig.update({k: "constexpr" for k in const})
    return compile_kernel(KERNELS["backward"], sig, const, warps)


STEPS_PER_LOOP = {"v1": 1, "v2": 1, "v3": 2, "v4": 2}
"""Time steps per iteration of each forward version's compiled loop (v3 and v4 are unrolled by two)."""


def version(v, dh=64, warps=4, dtype="bf16"):
    """Lesson 6's forward version ``v`` ('v1' ... 'v4', :mod:`gpulab.rnn.fused.versions`) compiled for sm_90 (LSTM,
    BLOCK_B = 16); v4 is the package's fused forward without saved gates."""
    runtime.one_of("v", v, tuple(STEPS_PER_LOOP))
    dh, warps = runtime.positive_int("dh", dh), _warps("warps", warps)
    runtime.one_of("dtype", dtype, _DTYPES)
    if v == "v4":
        return forward(dh, warps, False, dtype)
    kernel = versions.KERNELS[v]
    sig = {n: f"*{dtype}" for n in ("wx_ptr", "r_ptr", "b_ptr", "s0_ptr", "out_ptr", "last_ptr")}
    sig.update({n: "i32" for n in ("B", "T", "NH")})
    const = dict(DH=dh, BLOCK_B=16, IS_FP32=dtype == "fp32", PRECISION="ieee")
    sig.update({k: "constexpr" for k in const})
    return compile_kernel(kernel, sig, const, warps)


def version_stats(dh=64, warps=4, dtype="bf16") -> list[dict]:
    """Per forward version: SASS instructions, barriers, tensor-core and special-function instructions, global and
    shared loads and stores *per time step and warp* of the compiled loop, and registers per thread."""
    rows = []
    for v, steps in STEPS_PER_LOOP.items():
        kernel = version(v, dh, warps, dtype)
        body, ops, regs = loop_stats(kernel, f"{v}_dh{dh}_w{warps}")

        def count(pred, ops=ops, steps=steps):
            return sum(c for o, c in ops.items() if pred(o)) / steps

        rows.append({
            "version": v, "dh": dh, "warps": warps, "dtype": dtype, "registers": regs,
            "instructions": len(body) / steps, "barriers": count(lambda o: o.startswith("BAR")),
            "mma": count(lambda o: "MMA" in o), "mufu": count(lambda o: o.startswith("MUFU")),
            "global_loads": count(lambda o: o.startswith("LDG")), "global_stores": count(lambda o: o.startswith("STG")),
            "shared_loads": count(lambda o: o.startswith("LDS")), "shared_stores": count(lambda o: o.startswith("STS")),
        })  # fmt: skip
    return rows


def shared_bytes(op: str) -> int:
    """Bytes one warp-wide shared-memory instruction moves: ``LDSM.16.M88.n`` n 8x8 matrices of 16-bit values (128 B
    each), ``LDS``/``STS`` 4 B per thread (``.64`` 8 B, ``.128`` 16 B; ``.U16`` counts as 4)."""
    if not isinstance(op, str) or not op.startswith(("LDSM", "LDS", "STS")):
        raise ValueError(f"op must be a shared-memory opcode such as 'LDSM.16.M88.4' or 'STS.64', got {op!r}.")
    m = re.match(r"LDSM\.16\.M(?:T)?88(?:\.(\d))?", op)
    if m:
        return 128 * int(m.group(1) or 1)
    width = re.search(r"\.(64|128)\b", op)
    return 32 * (int(width.group(1)) // 8 if width else 4)


def _gluon_stats(kernel, name, dump=None, **row) -> dict:
    """A compiled Gluon version's step loop (the longest backward branch, so a spin loop inside counts once): per
    step and warp, what :func:`version_stats` counts, plus ``ldsm`` (``ldmatrix`` instructions: tensor-core operands
    read from shared memory) and ``ldsm_bytes``, ``spills`` (local loads and stores) and ``shared_bytes``."""
    body, ops, regs = loop_stats(kernel, name, dump)

    def count(pred):
        return sum(c for o, c in ops.items() if pred(o))

    return {
        **row, "registers": regs, "shared_bytes": int(kernel.metadata.shared), "instructions": len(body),
        "barriers": count(lambda o: o.startswith("BAR")), "mma": count(lambda o: "MMA" in o),
        "mufu": count(lambda o: o.startswith("MUFU")), "ldsm": count(lambda o: o.startswith("LDSM")),
        "ldsm_bytes": sum(c * shared_bytes(o) for o, c in ops.items() if o.startswith("LDSM")),
        "global_loads": count(lambda o: o.startswith("LDG")), "global_stores": count(lambda o: o.startswith("STG")),
        "shared_loads": count(lambda o: o.startswith("LDS") and not o.startswith("LDSM")),
        "shared_stores": count(lambda o: o.startswith("STS")),
        "spills": count(lambda o: o.startswith(("STL", "LDL"))),
    }  # fmt: skip


def v6_stats(dh=768, warps=4, block_u=8, dtype="bf16", save_gates=True, block_b=16, dump=None) -> dict:
    """Version 6's forward (:mod:`gpulab.rnn.fused.split_gluon`, Gluon) compiled for sm_90: its step
    loop's counts per step and warp (:func:`_gluon_stats`; its listings into ``dump`` if given)."""
    from gpulab.rnn.fused import split_gluon  # noqa: PLC0415

    cfg = split_gluon.v6_config(dh, block_u=block_u, block_b=block_b, warps=warps)
    kernel = split_gluon.compile_sm90(dh, cfg, dtype, save_gates)
    return _gluon_stats(kernel, f"v6_dh{dh}_u{block_u}_w{warps}", dump, version="v6", dh=dh, warps=warps,
                        block_u=block_u, block_b=cfg.block_b, dtype=dtype, save_gates=save_gates)  # fmt: skip


def units_stats(which="forward", dh=1536, warps=8, block_u=12, dtype="fp16", block_b=16, dump=None) -> dict:
    """The two-piece split kernels (:mod:`gpulab.rnn.fused.split_gluon_units` forward, ``which`` 'forward', or
    :mod:`gpulab.rnn.fused.split_gluon_backward_units`, 'backward') compiled for sm_90: their step loop's counts per
    step and warp (:func:`_gluon_stats`)."""
    from gpulab.rnn.fused import split_gluon_backward_units, split_gluon_units  # noqa: PLC0415
    from gpulab.rnn.fused.gluon_tiles import UnitsConfig  # noqa: PLC0415

    module = split_gluon_units if runtime.one_of("which", which, ("forward", "backward")) == "forward" else (
        split_gluon_backward_units)  # fmt: skip
    kernel = module.compile_sm90(dh, UnitsConfig(block_u, block_b, warps), dtype)
    return _gluon_stats(kernel, f"units_{which}_dh{dh}_u{block_u}_w{warps}", dump, version=f"units {which}", dh=dh,
                        warps=warps, block_u=block_u, block_b=block_b, dtype=dtype)  # fmt: skip


def b4_stats(dh=768, warps=8, block_u=16, dtype="bf16", block_b=16, dump=None, sum_db=False) -> dict:
    """Backward version b4 (:mod:`gpulab.rnn.fused.split_gluon_backward`, Gluon) compiled for sm_90:
    its step loop's counts per step and warp (:func:`_gluon_stats`; its listings into ``dump`` if given)."""
    from gpulab.rnn.fused import split_gluon_backward  # noqa: PLC0415

    cfg = split_gluon_backward.b4_config(dh, block_u=block_u, block_b=block_b, warps=warps)
    kernel = split_gluon_backward.compile_sm90(dh, cfg, dtype, sum_db=sum_db)
    return _gluon_stats(kernel, f"b4_dh{dh}_u{block_u}_w{warps}", dump, version="b4", dh=dh, warps=warps,
                        block_u=block_u, block_b=cfg.block_b, dtype=dtype)  # fmt: skip


def _cuobjdump(flag, cubin) -> str:
    return subprocess.run([str(BIN / "cuobjdump"), flag, str(cubin)], capture_output=True, text=True).stdout


def loop_stats(kernel, name, dump=None):
    """Disassemble; find the longest backward branch (the time loop) and count its instructions by opcode."""
    _compiled(kernel, name, dump)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = pathlib.Path(tmp, f"gpulab_{name}.cubin")
        cubin.write_bytes(kernel.asm["cubin"])
        sass = _cuobjdump("-sass", cubin)
        res = _cuobjdump("-res-usage", cubin)
    ins = re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)
    addr = [(int(a, 16), text.strip()) for a, text in ins]
    loops = []
    for a, text in addr:
        m = re.search(r"BRA (0x[0-9a-f]+)", text)
        if m and int(m.group(1), 16) < a:
            loops.append((int(m.group(1), 16), a))
    start, end = max(loops, key=lambda se: se[1] - se[0])
    body = [t for a, t in addr if start <= a <= end]
    ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0] for t in body)
    if dump:
        os.makedirs(dump, exist_ok=True)
        for key in ("ttgir", "ptx"):
            pathlib.Path(dump, f"{name}.{key}").write_text(kernel.asm[key])
        pathlib.Path(dump, f"{name}.loop.sass").write_text("\n".join(body) + "\n")
    regs = re.search(r"REG:(\d+)", res)
    return body, ops, int(regs.group(1)) if regs else -1


def report(kernel, name, dump=None):
    """Print the time loop's instruction counts of a compiled ``kernel`` (see :func:`loop_stats`)."""
    _compiled(kernel, name, dump)
    body, ops, regs = loop_stats(kernel, name, dump)
    md = kernel.metadata
    mem = {k: sum(v for o, v in ops.items() if o.startswith(k)) for k in ("LDG", "STG", "LDS", "STS", "LDSM", "STSM")}
    print(f"{name}: {len(body)} instructions per loop iteration and warp (the forward: two steps); registers {regs}, "
          f"shared {md.shared} B")  # fmt: skip
    print(f"  BAR {ops.get('BAR.SYNC.DEFER_BLOCKING', 0)}  HMMA {sum(v for o, v in ops.items() if 'MMA' in o)}  "
          f"MUFU {sum(v for o, v in ops.items() if o.startswith('MUFU'))}  "
          + "  ".join(f"{k} {v}" for k, v in mem.items()))  # fmt: skip
    print("  " + ", ".join(f"{o} {c}" for o, c in ops.most_common(14)))


def run_offline(argv, cwd=None, timeout=600) -> subprocess.CompletedProcess:
    """Run ``main(argv)`` in a fresh Python process that compiles kernels (see the module docstring); returns the
    finished process (its stdout holds the report)."""
    if isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)):
        raise runtime.ArgumentTypeError(
            f"argv must be a list of command-line words, got {type(argv).__name__} {argv!r:.60}; e.g. ['forward', "
            "'--dh', '64'] (a string would be split into letters)."
        )
    if cwd is not None and not isinstance(cwd, (str, os.PathLike)):
        raise runtime.ArgumentTypeError(f"cwd must be a folder path (str or Path) or None, got {type(cwd).__name__}.")
    timeout = runtime.finite_float("timeout", timeout, positive=True)
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "GPULAB_DEVICE")}
    root = str(pathlib.Path(__file__).resolve().parents[3])  # the directory that holds the gpulab package
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-c", _BOOTSTRAP, *map(str, argv)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd or root, env=env, timeout=timeout)


def kwidths(ttgir: str) -> list[tuple[str, str]]:
    """(operand index, kWidth) of every tensor-core operand layout in a TTGIR listing."""
    if not isinstance(ttgir, str):
        raise runtime.ArgumentTypeError(
            f"ttgir must be the TTGIR text (a str, e.g. kernel.asm['ttgir']), got {type(ttgir).__name__}."
        )
    return re.findall(r"dot_op<\{opIdx = (\d), parent = #mma\d*, kWidth = (\d+)\}>", ttgir)


def main(argv=None):
    if runtime.INTERPRET:  # kernels were defined for the interpreter: compile them in a process that does not
        done = run_offline(sys.argv[1:] if argv is None else argv)
        print(done.stdout, end="")
        print(done.stderr, end="", file=sys.stderr)
        return done.returncode
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "which",
        nargs="?",
        default="both",
        choices=("forward", "backward", "both", "versions", "v6", "b4", "units", "units-b"),
    )
    p.add_argument("--save-gates", action="store_true")
    p.add_argument("--dh", type=int, default=64)
    p.add_argument("--warps", type=int, default=0, help="default: the tiling chooser's")
    p.add_argument("--dtype", default="bf16", choices=_DTYPES)
    p.add_argument("--dump", default=None, help="write TTGIR, PTX and the loop's SASS here")
    p.add_argument("--set", nargs="*", default=[], help="extra constexprs, NAME=int")
    a = p.parse_args(argv)
    extra = {k: int(v) for k, v in (kv.split("=") for kv in a.set)}
    tag = "".join(f"_{k}{v}" for k, v in extra.items())
    tdt = dtypes.as_dtype(a.dtype)
    if a.which == "versions":  # one JSON line per forward version: its loop's instructions per step and warp
        import json

        for row in version_stats(a.dh, a.warps or 4, a.dtype):
            print(json.dumps({**row, "triton": triton.__version__, "target": "sm_90"}))
        return 0
    if a.which in ("units", "units-b"):  # one JSON line: a two-piece kernel's step loop (BLOCK_U, BLOCK_B from --set)
        import json

        which = "forward" if a.which == "units" else "backward"
        row = units_stats(which, a.dh, a.warps or 8, extra.get("BLOCK_U", 12), a.dtype, extra.get("BLOCK_B", 16),
                          a.dump)  # fmt: skip
        print(json.dumps({**row, "triton": triton.__version__, "target": "sm_90"}))
        return 0
    if a.which in ("v6", "b4"):  # one JSON line: the Gluon version's step loop (BLOCK_U from --set)
        import json

        bb = extra.get("BLOCK_B", 16)
        if a.which == "v6":
            row = v6_stats(a.dh, a.warps or 4, extra.get("BLOCK_U", 8), a.dtype, a.save_gates, bb, a.dump)
        else:
            row = b4_stats(a.dh, a.warps or 8, extra.get("BLOCK_U", 16), a.dtype, bb, a.dump, bool(extra.get("SUM_DB")))
        print(json.dumps({**row, "triton": triton.__version__, "target": "sm_90"}))
        return 0
    if a.which in ("forward", "both"):
        w = a.warps or fused_tiling(16, 12, a.dh, "lstm", tdt, gpu="H100", direction="forward").num_warps
        report(
            forward(a.dh, w, a.save_gates, a.dtype, **extra),
            f"forward_dh{a.dh}_w{w}{'_gates' if a.save_gates else ''}{tag}",
            a.dump,
        )
    if a.which in ("backward", "both"):
        w = a.warps or fused_tiling(16, 12, a.dh, "lstm", tdt, gpu="H100", direction="backward").num_warps
        report(backward(a.dh, w, a.dtype, **extra), f"backward_dh{a.dh}_w{w}{tag}", a.dump)
    return 0


if __name__ == "__main__":
    sys.exit(main())
