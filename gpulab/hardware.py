"""GPU descriptions: a spec table of common GPUs and the live device's properties.

Kernels choose dtypes and tiles from a :class:`GPUSpec`, never from the name of the machine they happen to run on,
so those choices can be tested on CPU for any GPU in the table (a T4 has no bf16 and 64 KB of shared memory per SM;
an H100 has bf16 and 228 KB).

Rates are the vendor's dense figures (no 2:4 sparsity), at boost clock, for the SXM/flagship variant named:
``fp32_tflops`` is the non-tensor FMA rate; ``tensor_tflops`` holds the tensor-core rate per operand dtype with
fp32 accumulation (``"tf32"`` for fp32 operands in TF32 mode). A GPU without tensor cores for a dtype lacks the key.
"""

from __future__ import annotations

import dataclasses
import functools
import re

import torch

from gpulab import dtypes, runtime

__all__ = ["GPUSpec", "SPECS", "spec", "live_properties", "gpu_slug", "cache_level", "spec_table", "ridge_point",
           "supported_dtypes", "default_dtype", "require_dtype"]  # fmt: skip

KB = 1024
MB = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class GPUSpec:
    """What a kernel author needs to know about one GPU.

    Sizes in bytes, bandwidth in GB/s (1e9 bytes/s), rates in TFLOP/s (1e12 FLOP/s).
    """

    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    hbm_gbps: float
    memory_gb: float
    l2_bytes: int
    smem_per_sm: int  # shared memory + L1 carve-out available to shared memory on one SM
    smem_per_block: int  # the most one program (thread block) can opt in to
    l1_per_sm: int  # unified L1/shared-memory capacity per SM
    fp32_tflops: float
    tensor_tflops: dict = dataclasses.field(default_factory=dict)
    registers_per_sm: int = 65536
    max_registers_per_thread: int = 255
    source: str = "vendor spec sheet"

    @property
    def has_bf16(self) -> bool:
        """bf16 arithmetic in hardware: compute capability 8.0 (Ampere) and newer."""
        return self.compute_capability >= (8, 0)

    @property
    def has_tf32(self) -> bool:
        return "tf32" in self.tensor_tflops

    def peak_tflops(self, dtype="float32", tensor_cores: bool = True, allow_tf32: bool = False) -> float:
        """Peak rate for a dtype: tensor cores where the GPU has them for it, else the FP32 pipe."""
        tensor_cores = runtime.strict_bool("tensor_cores", tensor_cores)
        allow_tf32 = runtime.strict_bool("allow_tf32", allow_tf32)
        if dtype in ("tf32", "float8"):
            key = dtype
        else:
            key = str(dtypes.as_dtype(dtype)).replace("torch.", "")  # 'fp16', 'half', torch.float16 -> 'float16'
        if key == "float64":
            raise ValueError("dtype float64 has no peak rate in the spec table; use float32, tf32, float16, bfloat16.")
        if key == "tf32":
            return self.tensor_tflops.get("tf32", self.fp32_tflops)
        if key == "float8":
            if "float8" not in self.tensor_tflops:
                raise ValueError(f"{self.name} has no float8 tensor cores.")
            return self.tensor_tflops["float8"]
        if key == "float32":
            return self.tensor_tflops["tf32"] if (allow_tf32 and self.has_tf32) else self.fp32_tflops
        if tensor_cores and key in self.tensor_tflops:
            return self.tensor_tflops[key]
        return self.fp32_tflops * (2 if key == "float16" else 1)

    @property
    def slug(self) -> str:
        return gpu_slug(self.name)


# fmt: off
SPECS: dict[str, GPUSpec] = {s.name: s for s in [
    GPUSpec("NVIDIA H100 SXM5 80GB", (9, 0), 132, 3350, 80, 50 * MB, 228 * KB, 227 * KB, 256 * KB, 66.9,
            {"tf32": 494.7, "float16": 989.4, "bfloat16": 989.4, "float8": 1978.9}),
    GPUSpec("NVIDIA H100 PCIe 80GB", (9, 0), 114, 2000, 80, 50 * MB, 228 * KB, 227 * KB, 256 * KB, 51.2,
            {"tf32": 378.0, "float16": 756.0, "bfloat16": 756.0, "float8": 1513.0}),
    GPUSpec("NVIDIA H200 SXM 141GB", (9, 0), 132, 4800, 141, 50 * MB, 228 * KB, 227 * KB, 256 * KB, 66.9,
            {"tf32": 494.7, "float16": 989.4, "bfloat16": 989.4, "float8": 1978.9}),
    GPUSpec("NVIDIA A100 SXM4 80GB", (8, 0), 108, 2039, 80, 40 * MB, 164 * KB, 163 * KB, 192 * KB, 19.5,
            {"tf32": 156.0, "float16": 312.0, "bfloat16": 312.0}),
    GPUSpec("NVIDIA V100 SXM2 32GB", (7, 0), 80, 900, 32, 6 * MB, 96 * KB, 96 * KB, 128 * KB, 15.7,
            {"float16": 125.0}),
    GPUSpec("NVIDIA GeForce RTX 4090", (8, 9), 128, 1008, 24, 72 * MB, 100 * KB, 99 * KB, 128 * KB, 82.6,
            {"tf32": 82.6, "float16": 165.2, "bfloat16": 165.2, "float8": 330.3}),
    GPUSpec("NVIDIA GeForce RTX 3090 Ti", (8, 6), 84, 1008, 24, 6 * MB, 100 * KB, 99 * KB, 128 * KB, 40.0,
            {"tf32": 40.0, "float16": 80.0, "bfloat16": 80.0}),
    GPUSpec("NVIDIA L4", (8, 9), 58, 300, 24, 48 * MB, 100 * KB, 99 * KB, 128 * KB, 30.3,
            {"tf32": 60.0, "float16": 121.0, "bfloat16": 121.0, "float8": 242.0}),
    GPUSpec("NVIDIA Tesla P100 SXM2 16GB", (6, 0), 56, 732, 16, 4 * MB, 64 * KB, 48 * KB, 24 * KB, 10.6, {}),
    GPUSpec("NVIDIA Tesla T4", (7, 5), 40, 320, 16, 4 * MB, 64 * KB, 64 * KB, 96 * KB, 8.1,
            {"float16": 65.0}),
]}
# fmt: on

_ALIASES = {
    "h100": "NVIDIA H100 SXM5 80GB",
    "h100 sxm": "NVIDIA H100 SXM5 80GB",
    "h100 80gb hbm3": "NVIDIA H100 SXM5 80GB",
    "h100 pcie": "NVIDIA H100 PCIe 80GB",
    "h200": "NVIDIA H200 SXM 141GB",
    "a100": "NVIDIA A100 SXM4 80GB",
    "v100": "NVIDIA V100 SXM2 32GB",
    "rtx 4090": "NVIDIA GeForce RTX 4090",
    "4090": "NVIDIA GeForce RTX 4090",
    "rtx 3090 ti": "NVIDIA GeForce RTX 3090 Ti",
    "3090 ti": "NVIDIA GeForce RTX 3090 Ti",
    "l4": "NVIDIA L4",
    "p100": "NVIDIA Tesla P100 SXM2 16GB",
    "t4": "NVIDIA Tesla T4",
}


def gpu_slug(name: str) -> str:
    """File-name form of a device name: 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    if not isinstance(name, str):
        raise runtime.ArgumentTypeError(f"name must be a device name (str), got {name!r}.")
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def _lookup(name: str) -> GPUSpec | None:
    """Match a table entry by exact name, alias, or the alias contained in a live device name."""
    if name in SPECS:
        return SPECS[name]
    key = re.sub(r"[^a-z0-9]+", " ", name.lower().replace("nvidia", "").replace("tesla", "")).strip()
    if key in _ALIASES:
        return SPECS[_ALIASES[key]]
    # Longest alias first, so "h100 pcie" wins over "h100" and "3090 ti" over nothing.
    for alias in sorted(_ALIASES, key=len, reverse=True):
        if re.search(rf"(^| ){re.escape(alias)}( |$)", key):
            return SPECS[_ALIASES[alias]]
    return None


def spec(gpu=None) -> GPUSpec:
    """The description of ``gpu``: a :class:`GPUSpec`, a name or alias ('H100', 'T4', 'NVIDIA L4'), or None.

    None means the live CUDA device (its table entry, with live SM count and L2 size), or the H100 on a machine
    without a GPU: the course's reference GPU, whose stored results the notebooks show.
    """
    if isinstance(gpu, GPUSpec):
        return gpu
    if gpu is None:
        if runtime.on_gpu():
            return _live_spec()
        return SPECS[_ALIASES["h100"]]
    if not isinstance(gpu, str):
        raise TypeError(f"gpu must be a GPUSpec, a name like 'H100', or None; got {type(gpu).__name__}.")
    found = _lookup(gpu)
    if found is None:
        raise ValueError(f"gpu={gpu!r} is not in gpulab's spec table; known: {', '.join(sorted(_ALIASES))}.")
    return found


def live_properties(index: int | None = None) -> dict:
    """Properties the driver reports for the current (or given) CUDA device; {} without one.

    Cached per device: kernel wrappers consult the device description on every call (dtype rules, tiles), and
    asking the driver each time costs about a millisecond of host time, more than many kernels take.
    """
    if index is not None:
        index = runtime.nonnegative_int("index", index)
    if not torch.cuda.is_available():
        return {}
    return dict(_live_properties(torch.cuda.current_device() if index is None else index))


@functools.cache
def _live_properties(idx: int) -> dict:
    p = torch.cuda.get_device_properties(idx)
    props = {
        "name": p.name,
        "compute_capability": (p.major, p.minor),
        "sm_count": p.multi_processor_count,
        "memory_gb": round(p.total_memory / 1e9, 1),
        "l2_bytes": getattr(p, "L2_cache_size", None),
        "registers_per_sm": getattr(p, "regs_per_multiprocessor", None),
        "smem_per_sm": getattr(p, "shared_memory_per_multiprocessor", None),
        "smem_per_block": getattr(p, "shared_memory_per_block_optin", None),
        "max_threads_per_sm": getattr(p, "max_threads_per_multi_processor", None),
        "warp_size": getattr(p, "warp_size", 32),
    }
    try:  # clock and bus width come from Triton's driver utilities
        import triton

        d = triton.runtime.driver.active.utils.get_device_properties(idx)
        props["sm_clock_mhz"] = d.get("sm_clock_rate", 0) / 1e3
        props["mem_clock_mhz"] = d.get("mem_clock_rate", 0) / 1e3
        props["mem_bus_width_bits"] = d.get("mem_bus_width")
        if d.get("mem_clock_rate") and d.get("mem_bus_width"):
            # DDR: two transfers per clock.
            props["hbm_gbps_theoretical"] = round(2 * d["mem_clock_rate"] * 1e3 * d["mem_bus_width"] / 8 / 1e9, 1)
    except Exception:  # noqa: BLE001 - optional detail; any driver quirk just leaves it out
        pass
    return props


def _live_spec() -> GPUSpec:
    return _live_spec_of(torch.cuda.current_device())


@functools.cache
def _live_spec_of(idx: int) -> GPUSpec:
    p = live_properties(idx)
    base = _lookup(p["name"])
    if base is None:
        # Unknown GPU: build a description from what the driver says; rates unknown (0) until measured.
        return GPUSpec(
            name=p["name"],
            compute_capability=p["compute_capability"],
            sm_count=p["sm_count"],
            hbm_gbps=p.get("hbm_gbps_theoretical") or 0.0,
            memory_gb=p["memory_gb"],
            l2_bytes=p["l2_bytes"] or 0,
            smem_per_sm=p["smem_per_sm"] or 48 * KB,
            smem_per_block=p["smem_per_block"] or 48 * KB,
            l1_per_sm=p["smem_per_sm"] or 48 * KB,
            fp32_tflops=0.0,
            source="live device properties (not in the spec table)",
        )
    return dataclasses.replace(
        base,
        name=p["name"],
        sm_count=p["sm_count"],
        l2_bytes=p["l2_bytes"] or base.l2_bytes,
        source=f"spec table ({base.name}) with live SM count and L2 size",
    )


def cache_level(working_set_bytes: int, gpu=None) -> str:
    """Which level of the hierarchy can hold a working set that every SM reads in full: 'L1', 'L2' or 'HBM'.

    Each SM caches what it reads in its own L1, so a working set up to one SM's L1 stays there; beyond that, up to
    the L2 size, it is served by L2; larger working sets stream from HBM. (Real caches start missing a little before
    they are full; this is the first-order picture the lesson 0 sweep tests.)
    """
    working_set_bytes = runtime.nonnegative_int("working_set_bytes", working_set_bytes)
    s = spec(gpu)
    if working_set_bytes <= s.l1_per_sm:
        return "L1"
    if working_set_bytes <= s.l2_bytes:
        return "L2"
    return "HBM"


def spec_table(specs=None) -> str:
    """The spec table as text: one row per GPU, with the ridge point (FLOPs per byte needed to be compute-bound)."""
    if specs is None:
        specs = list(SPECS.values())
    where = " (e.g. [hardware.spec('H100')], or None for the whole table)"
    specs = runtime.record_list("specs", specs, GPUSpec, "hardware.GPUSpec records", where)
    head = (
        f"{'GPU':30s} {'CC':>4s} {'SMs':>4s} {'HBM GB/s':>9s} {'L2 MB':>6s} {'SMEM/SM KB':>10s} {'FP32 TF':>8s} "
        f"{'FP16 TC TF':>10s} {'bf16':>5s} {'ridge FP16':>10s}"
    )
    rows = [head, "-" * len(head)]
    for s in specs:
        fp16 = s.peak_tflops("float16")
        rows.append(
            f"{s.name:30s} {s.compute_capability[0]}.{s.compute_capability[1]:<2d} {s.sm_count:4d} {s.hbm_gbps:9,.0f} "
            f"{s.l2_bytes / MB:6.0f} {s.smem_per_sm // KB:10d} {s.fp32_tflops:8.1f} {fp16:10.1f} "
            f"{'yes' if s.has_bf16 else 'no':>5s} {ridge_point(s, 'float16'):10.0f}"
        )
    return "\n".join(rows)


def ridge_point(gpu=None, dtype="float16") -> float:
    """FLOPs per byte of HBM traffic at which the compute roof meets the memory roof: peak rate / bandwidth."""
    s = spec(gpu)
    return s.peak_tflops(dtype) * 1e12 / (s.hbm_gbps * 1e9)


# ----------------------------------------------------------------------------------------------------------------
# dtypes: which ones the kernels take here, or on a given GPU


def supported_dtypes(gpu=None) -> tuple[torch.dtype, ...]:
    """Dtypes gpulab kernels accept in the current mode, or on ``gpu`` (a name or :class:`gpulab.hardware.GPUSpec`).

    In the interpreter: fp32 and fp16 (bf16 arithmetic is wrong there). On a GPU: fp32, fp16, and bf16 where the
    architecture has it (compute capability 8.0 and newer; not on a T4 or V100).
    """
    if gpu is None and runtime.INTERPRET:
        return (torch.float32, torch.float16)
    has_bf16 = _this_gpu_has_bf16() if gpu is None else spec(gpu).has_bf16
    return (torch.float32, torch.float16, torch.bfloat16) if has_bf16 else (torch.float32, torch.float16)


@torch.compiler.assume_constant_result
def _this_gpu_has_bf16() -> bool:
    """Whether the current GPU has bf16 (read once per call eagerly; a constant to ``torch.compile``, which cannot
    trace the CUDA property query: so a compiled function that validates its dtype has no graph break)."""
    return spec().has_bf16


def default_dtype(gpu=None) -> torch.dtype:
    """The low-precision dtype a lesson should use: bf16 where the GPU has it, else fp16; fp32 in the interpreter.

    With ``gpu`` (a name or GPUSpec) the answer is for that GPU, so the choice can be tested on CPU for any GPU.
    """
    if gpu is None and runtime.INTERPRET:
        return torch.float32
    return torch.bfloat16 if torch.bfloat16 in supported_dtypes(gpu) else torch.float16


def _conversion(name: str, dtype: torch.dtype) -> str:
    """How to give ``name`` the dtype ``dtype``: an argument named ``dtype`` takes its name, a tensor a method."""
    if name == "dtype":
        return f"dtype={dtypes.name(dtype)!r}"
    return f"{name}.float()" if dtype == torch.float32 else f"{name}.to({dtype})"


def require_dtype(name: str, dtype, gpu=None, allowed=None) -> torch.dtype:
    """Raise a ValueError naming ``name`` unless ``dtype`` is usable here (or on ``gpu``); return it as a torch dtype.

    ``allowed`` narrows the kernel's own choice (e.g. ``(torch.float32,)``) before the mode's restrictions apply.
    """
    dtype = dtypes.as_dtype(dtype, name)
    supported = tuple(allowed) if allowed is not None else (torch.float32, torch.float16, torch.bfloat16)
    here = supported_dtypes(gpu)
    if dtype not in supported:  # what runs here (no bf16 in the interpreter or on an old GPU), and how to get it
        usable = tuple(d for d in supported if d in here) or supported
        if usable == supported:
            where = ""
        elif gpu is not None:
            where = f" on GPU {getattr(gpu, 'name', gpu)}"
        else:
            where = " in Triton's CPU interpreter" if runtime.INTERPRET else " on this GPU"
        given = f"{name}={dtype} is not supported" if name == "dtype" else f"{name} has dtype {dtype}"
        raise ValueError(f"{given}; this kernel supports {dtypes.names_of(usable)}{where}. Convert it, e.g. "
                         f"`{_conversion(name, usable[0])}`.")  # fmt: skip
    if dtype not in here:
        if gpu is None and runtime.INTERPRET and dtype == torch.bfloat16:
            raise ValueError(
                f"{name} is bfloat16, which Triton's CPU interpreter computes wrongly (silently); on CPU use "
                f"{dtypes.names_of(tuple(d for d in supported if d in here))}, e.g. "
                f"`{_conversion(name, torch.float32)}`, or run on a GPU with bf16."
            )
        where = f"GPU {gpu}" if gpu is not None else "this GPU"
        usable = dtypes.names_of(tuple(d for d in supported if d in here))
        raise ValueError(f"{name} is {dtype}, which {where} has no hardware for; use {usable}.")
    return dtype
