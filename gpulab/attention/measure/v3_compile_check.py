"""Version 3 compiled for sm_90 on any machine, and the structure of what the hardware would run.

What you will learn: a warp-specialized kernel's schedule can be read off its PTX before any GPU runs it.
:func:`compile_sm90` compiles :func:`gpulab.attention.v3.forward.attention_forward_v3_kernel` with Triton's own
compiler for ``GPUTarget("cuda", 90, 32)`` (Gluon has no CPU interpreter, so this is what the CPU tests can check),
and :func:`structure` counts in the PTX and in ``ptxas -v`` (the assembler Triton ships):

- ``wgmma.mma_async`` instructions (the tensor-core products; one ``warpgroup_mma`` is D/16 or BLOCK_N/16 of them);
- ``wgmma.wait_group.sync.aligned N`` depths: step 3 must wait with N = 1 somewhere (the next block's scores done
  while this block's ``P V`` still runs); steps 1-2 wait with 0 only;
- ``setmaxnreg`` values: the register budget each partition asks for (consumers up, producer down);
- shared memory (the kernel's static allocation, at most 227 KB on the H100) and ``ptxas -v``'s spill bytes;
- the local-memory instructions (``STL``/``LDL``: spills) inside each innermost loop that issues wgmma, read off the
  SASS (``nvdisasm`` on the cubin): ``ptxas -v`` counts every spill site once, a store before the loop as much as
  one inside it, while only those inside run once per block and take shared memory's bandwidth (the same unit).

Compilation runs in a fresh process (:func:`structure_in_fresh_process`): gpulab's interpreter mode
(``TRITON_INTERPRET=1``) is fixed at the first import, and Gluon compiles only outside it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile

from gpulab.attention import sm90
from gpulab.attention.reference import check_window

__all__ = ["compile_sm90", "structure", "structure_in_fresh_process", "structures_in_fresh_process", "ptxas_report",
           "gluon_api_problem", "compile_backward_sm90", "backward_structures_in_fresh_process"]  # fmt: skip


def gluon_api_problem() -> str | None:
    """None when the installed Triton has every Gluon call version 3 makes (:func:`gpulab.gluon_compat.problem`,
    which reads the parameters of what this Triton offers), else what is missing, naming the Triton version (for test
    skips)."""
    import triton  # noqa: PLC0415

    try:
        from triton.experimental.gluon._runtime import GluonASTSource  # noqa: F401, PLC0415
        from triton.experimental.gluon.language.nvidia.hopper import tma, warpgroup_mma_wait  # noqa: F401, PLC0415

        from gpulab import gluon_compat  # noqa: PLC0415
    except ImportError as e:
        return f"Triton {triton.__version__} lacks Gluon's Hopper API ({e})"
    return gluon_compat.problem()


def compile_sm90(head_dim: int = 128, is_causal: bool = False, step: int = 3, dtype: str = "bf16", cfg=None,
                 gqa: bool = False, window_size=(-1, -1), varlen: bool = False):  # fmt: skip
    """Triton's compiled version 3 for sm_90 (nothing launched, no GPU needed); its ``asm`` holds 'ttgir', 'ptx',
    'cubin' and its ``metadata.shared`` the shared-memory bytes. ``gqa`` and ``window_size`` choose the variant
    (grouped-query heads; a window's bounded sides: only whether each side is bounded is compiled in), ``varlen``
    the packed batch's (``cfg`` persistent or one tile per program). Call from a process outside the
    interpreter."""
    import triton  # noqa: PLC0415
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415
    from triton.experimental.gluon._runtime import GluonASTSource  # noqa: PLC0415

    from gpulab import dtypes, runtime  # noqa: PLC0415
    from gpulab.attention.v3 import forward  # noqa: PLC0415

    torch_dtype = dtypes.as_dtype(runtime.one_of("dtype", dtype, ("bf16", "fp16")))
    if cfg is not None and not isinstance(cfg, forward.V3Config):
        raise TypeError(f"cfg must be a V3Config or None, got {type(cfg).__name__}.")
    cfg = cfg or forward.v3_config(head_dim, is_causal, step)
    q_layout, kv_layout = forward.smem_layouts(head_dim, cfg.block_n, torch_dtype)

    def desc(block, layout):
        return f"tensordesc<{dtype}[{','.join(map(str, block))}],{layout!r}>"

    constexprs = forward.constexprs(head_dim, is_causal, cfg, False if varlen else None, gqa, tuple(window_size),
                                    varlen)  # fmt: skip
    signature = {
        "q_desc": desc((1, 64, head_dim), q_layout),
        "k_desc": desc((1, cfg.block_n, head_dim), kv_layout),
        "v_desc": desc((1, cfg.block_n, head_dim), kv_layout),
        "o_desc": desc((1, 64, head_dim), q_layout),
        "lse_ptr": "*fp32",
        "o_ptr": f"*{dtype}",
        "cu_q": "*i32",
        "cu_k": "*i32",
        "n_q": "i32",
        "n_k": "i32",
        "n_bh": "i32",
        "group": "i32",
        "left": "i32",
        "right": "i32",
        "n_seq": "i32",
        "qk_scale": "fp32",
        **{name: "constexpr" for name in constexprs},
    }
    src = GluonASTSource(fn=forward.attention_forward_v3_kernel, signature=signature, constexprs=constexprs,
                         attrs={(i,): [["tt.divisibility", 16]] for i in range(4, 8)})  # fmt: skip
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "maxnreg": cfg.maxnreg})


def compile_backward_sm90(head_dim: int = 128, is_causal: bool = False, dtype: str = "bf16", cfg=None,
                          gqa_win: int = 0):  # fmt: skip
    """Triton's compiled version 3 *backward* (:func:`gpulab.attention.v3.backward.attention_backward_v3_kernel`) for
    sm_90, nothing launched; ``cfg`` a :class:`~gpulab.attention.v3.backward.V3BackwardConfig` or None (the default);
    ``gqa_win`` the kernel's ``GQA_WIN`` (:func:`gpulab.attention.v3.backward_configs.gqa_win`: grouped heads and a
    window's sides; 0 plain). Call from a process outside the interpreter."""
    import triton  # noqa: PLC0415
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415
    from triton.experimental.gluon._runtime import GluonASTSource  # noqa: PLC0415

    from gpulab import dtypes, runtime  # noqa: PLC0415
    from gpulab.attention.v3 import backward, forward  # noqa: PLC0415

    torch_dtype = dtypes.as_dtype(runtime.one_of("dtype", dtype, ("bf16", "fp16")))
    if cfg is not None and not isinstance(cfg, backward.V3BackwardConfig):
        raise TypeError(f"cfg must be a V3BackwardConfig or None, got {type(cfg).__name__}.")
    cfg = cfg or backward.backward_config(head_dim, is_causal)
    q_layout, kv_layout = forward.smem_layouts(head_dim, cfg.block_n, torch_dtype)
    constexprs = backward.constexprs(head_dim, is_causal, cfg, gqa_win)
    q_desc = f"tensordesc<{dtype}[1,64,{head_dim}],{q_layout!r}>"
    kv_desc = f"tensordesc<{dtype}[1,{cfg.block_n},{head_dim}],{kv_layout!r}>"
    signature = {"q_desc": q_desc, "k_desc": kv_desc, "v_desc": kv_desc, "do_desc": q_desc, "lse_ptr": "*fp32",
                 "delta_ptr": "*fp32", "dq_ptr": "*fp32", "dk_ptr": f"*{dtype}", "dv_ptr": f"*{dtype}",
                 "dq_out_ptr": f"*{dtype}", "cnt_ptr": "*i32", "cu_q_ptr": "*i32", "cu_k_ptr": "*i32",
                 "n_q": "i32", "n_k": "i32", "n_bh": "i32",
                 "group": "i32", "win_lo": "i32", "win_hi": "i32", "qk_scale": "fp32", "scale": "fp32",
                 **{name: "constexpr" for name in constexprs}}  # fmt: skip
    src = GluonASTSource(fn=backward.attention_backward_v3_kernel, signature=signature, constexprs=constexprs,
                         attrs={(i,): [["tt.divisibility", 16]] for i in range(4, 11)})  # fmt: skip
    options = {"num_warps": 4, **({} if cfg.maxnreg is None else {"maxnreg": cfg.maxnreg})}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def ptxas_report(ptx: str) -> str:
    """``ptxas -v`` on ``ptx`` for sm_90a with the assembler Triton ships (registers, stack frame, spill bytes)."""
    if not isinstance(ptx, str) or ".entry" not in ptx:
        raise ValueError(f"ptx must be PTX source text with an .entry, got {type(ptx).__name__} {str(ptx)[:60]!r}.")
    from triton.backends.nvidia import compiler as nv  # noqa: PLC0415

    ptxas = nv.get_ptxas(90).path
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        done = subprocess.run([ptxas, "-v", "-arch=sm_90a", src, "-o", os.path.join(tmp, "k.cubin")],
                              capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"ptxas failed:\n{done.stderr[-3000:]}")
    return done.stdout + done.stderr


def _wgmma_loops_local(cubin: bytes) -> list[list[int]]:
    """``[STL, LDL]`` per innermost loop of the SASS (``nvdisasm`` of ``cubin``) that holds an ``HGMMA`` (the
    consumers' block loops), in code order. A loop is a backward branch (``BRA`` to a label above it) whose range
    neither exits nor changes the register budget (``USETMAXREG``: those are the partitions' dispatch) and holds no
    other such loop."""
    from triton.backends.nvidia import compiler as nv  # noqa: PLC0415

    nvdisasm = os.path.join(os.path.dirname(nv.get_ptxas(90).path), "nvdisasm")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        done = subprocess.run([nvdisasm, "-c", path], capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"nvdisasm failed:\n{done.stderr[-2000:]}")
    lines = done.stdout.splitlines()
    labels = {m.group(1): i for i, x in enumerate(lines) if (m := re.match(r"\s*(\.L_x_\d+):", x))}
    loops = []
    for i, x in enumerate(lines):
        m = re.search(r"BRA `\((\.L_x_\d+)\)", x)
        if m and labels.get(m.group(1), i) < i:
            body = lines[labels[m.group(1)] : i + 1]
            if any("HGMMA" in b for b in body) and not any("EXIT" in b or "USETMAXREG" in b for b in body):
                loops.append((labels[m.group(1)], i, sum("STL" in b for b in body), sum("LDL" in b for b in body)))
    inner = [lo for lo in loops if not any(o != lo and lo[0] <= o[0] and o[1] <= lo[1] for o in loops)]
    return [[st, ld] for _, _, st, ld in sorted(inner)]


def structure(kernel) -> dict:
    """What a compiled version 3 does, from its PTX and ``ptxas -v``: ``wgmma`` (count of ``wgmma.mma_async``),
    ``wgmma_rs`` (those of them with the A operand in registers),
    ``wait_depths`` (sorted distinct N of ``wgmma.wait_group N``), ``setmaxnreg`` (list of (inc|dec, n)),
    ``shared`` (bytes), ``spill_stores``/``spill_loads`` (bytes), ``stack`` (bytes), ``registers``, ``warps``,
    ``loop_local`` (``[STL, LDL]`` instructions inside each innermost wgmma loop of the SASS, in code order),
    ``ptx_ops`` (counts of step 8's acquire-release atomic additions, L2 loads and exchanges), ``tma_loads`` and
    ``tma_stores`` (bulk tensor copies in and out; Triton 3.6 writes a load's destination ``shared::cluster``, 3.7 on
    ``shared::cta``: both are counted). ``wgmma_rs`` reads the
    PTX form: ``{d..}, {a..}, desc_b`` takes A from registers, ``{d..}, desc_a, desc_b`` from shared memory."""
    asm = getattr(kernel, "asm", None)
    if not isinstance(asm, dict) or "ptx" not in asm:
        raise TypeError(
            f"kernel must be a compiled Triton kernel (compile_sm90's result), got {type(kernel).__name__}."
        )
    ptx = asm["ptx"]
    report = ptxas_report(ptx)
    spills = [
        tuple(int(x) for x in m) for m in re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    ]
    stack = [int(x) for x in re.findall(r"(\d+) bytes stack frame", report)]
    regs = [int(x) for x in re.findall(r"Used (\d+) registers", report)]
    return {
        "wgmma": len(re.findall(r"wgmma\.mma_async", ptx)),
        "wgmma_rs": len(re.findall(r"wgmma\.mma_async[^{;]*\{[^}]*\}\s*,\s*\{", ptx)),
        "wait_depths": sorted({int(x) for x in re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx)}),
        "setmaxnreg": re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx),
        "shared": int(kernel.metadata.shared),
        "spill_stores": sum(s for s, _ in spills),
        "spill_loads": sum(lo for _, lo in spills),
        "stack": max(stack, default=0),
        "registers": max(regs, default=0),
        "warps": int(kernel.metadata.num_warps),
        "loop_local": _wgmma_loops_local(kernel.asm["cubin"]),
        "tma_loads": len(re.findall(r"cp\.async\.bulk\.tensor\.\dd\.shared::(?:cluster|cta)\.global", ptx)),
        "tma_stores": len(re.findall(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared::cta", ptx)),
        "atomic_adds": sorted(set(re.findall(r"(?:atom|red)\.global\.[a-z.]*add[a-z0-9.]*f32", ptx))),
        "ptx_ops": {
            "atom_acq_rel_gpu": len(re.findall(r"atom\.global\.gpu\.acq_rel\.add", ptx)),
            "ld_cg": len(re.findall(r"ld\.global\.cg", ptx)),
            "exch": len(re.findall(r"atom\.global\.[a-z.]*exch", ptx)),
        },  # fmt: skip
        "ptxas": report.strip()[-2000:],
    }


# torch.cuda.is_available patched: gpulab.runtime then picks compiled mode, so the Triton functions Gluon imports are
# not the interpreter's (nothing is launched; compiling for a GPUTarget needs no GPU).
_BOOTSTRAP = (
    "import sys, json, torch; torch.cuda.is_available = lambda: True; "
    "from gpulab.attention.measure import v3_compile_check as c\n"
    "from gpulab.attention.v3 import forward as f\n"
    "out = []\n"
    "for a in json.loads(sys.argv[1]):\n"
    "    cfg = f.V3Config(**a['cfg']) if a.get('cfg') else None\n"
    "    out.append(c.structure(c.compile_sm90(a['d'], a['causal'], a['step'], a['dtype'], cfg, a['gqa'],\n"
    "                                          a['window'], a.get('varlen', False))))\n"
    "sys.stdout.write(json.dumps(out))"
)


_BACKWARD_BOOTSTRAP = (
    "import sys, json, torch; torch.cuda.is_available = lambda: True; "
    "from gpulab.attention.measure import v3_compile_check as c\n"
    "from gpulab.attention.v3 import backward as b\n"
    "out = []\n"
    "for a in json.loads(sys.argv[1]):\n"
    "    cfg = b.V3BackwardConfig(**a['cfg']) if a.get('cfg') else None\n"
    "    out.append(c.structure(c.compile_backward_sm90(a['d'], a['causal'], a['dtype'], cfg, a['gqa_win'])))\n"
    "sys.stdout.write(json.dumps(out))"
)


def backward_structures_in_fresh_process(configs: list[dict], timeout: float = 600) -> list[dict]:
    """:func:`structure` of :func:`compile_backward_sm90` for each of ``configs`` (dicts with keys d, causal, and
    optionally dtype, cfg: V3BackwardConfig fields, and gqa_win), in one fresh process."""
    if not isinstance(configs, list) or not configs or not all(isinstance(c, dict) and "d" in c for c in configs):
        raise ValueError(f"configs must be a non-empty list of dicts with keys d, causal (dtype, cfg optional), "
                         f"got {configs!r}.")  # fmt: skip
    for c in configs:
        if c["d"] not in (64, 128) or c.get("dtype", "bf16") not in ("bf16", "fp16"):
            raise ValueError(f"configs: head dim must be 64 or 128 and dtype 'bf16' or 'fp16', got {c!r}.")
    arg = json.dumps([{"d": c["d"], "causal": bool(c["causal"]), "dtype": c.get("dtype", "bf16"),
                       "cfg": c.get("cfg"), "gqa_win": int(c.get("gqa_win", 0))} for c in configs])  # fmt: skip
    return json.loads(sm90.ttgir_in_fresh_process(_BACKWARD_BOOTSTRAP, arg, "version 3's backward", timeout))


def structure_in_fresh_process(head_dim=128, is_causal=False, step=3, dtype="bf16", cfg=None,
                               timeout: float = 600, gqa: bool = False, window_size=(-1, -1)) -> dict:  # fmt: skip
    """:func:`structure` of :func:`compile_sm90` run in a fresh Python process without ``TRITON_INTERPRET`` and
    ``GPULAB_DEVICE`` (the interpreter mode is fixed at gpulab's first import). ``cfg``: a dict of
    :class:`~gpulab.attention.v3.forward.V3Config` fields, or None for the default tiles."""
    return structures_in_fresh_process([dict(d=head_dim, causal=is_causal, step=step, dtype=dtype, cfg=cfg, gqa=gqa,
                                             window=window_size)], timeout)[0]  # fmt: skip


def structures_in_fresh_process(configs: list[dict], timeout: float = 600) -> list[dict]:
    """:func:`structure` of several compiles in one fresh process (one start-up for all): ``configs`` are dicts
    with keys d, causal, step, dtype and optionally cfg (V3Config fields), gqa (bool), window ((left, right)) and
    varlen (bool: the packed batch's kernel)."""
    if not isinstance(configs, list) or not configs or not all(isinstance(c, dict) and "d" in c for c in configs):
        raise ValueError(f"configs must be a non-empty list of dicts with keys d, causal (step, dtype, cfg optional), "
                         f"got {configs!r}.")  # fmt: skip
    for c in configs:
        if c["d"] not in (64, 128, 256) or c.get("dtype", "bf16") not in ("bf16", "fp16"):
            raise ValueError(f"configs: head dim must be 64, 128 or 256 and dtype 'bf16' or 'fp16', got {c!r}.")
        check_window(c.get("window", (-1, -1)), bool(c.get("causal")))
    arg = json.dumps([{"d": c["d"], "causal": bool(c["causal"]), "step": c.get("step", 3),
                       "dtype": c.get("dtype", "bf16"), "cfg": c.get("cfg"), "gqa": bool(c.get("gqa", False)),
                       "window": list(c.get("window", (-1, -1))), "varlen": bool(c.get("varlen", False))}
                      for c in configs])  # fmt: skip
    return json.loads(sm90.ttgir_in_fresh_process(_BOOTSTRAP, arg, "version 3", timeout))
