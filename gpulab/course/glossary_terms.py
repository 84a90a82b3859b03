"""The course's terms, as data: each defined in the lessons at or before its first use (:mod:`.glossary` checks it).

One dict per term: ``term`` (as the glossary page shows it), ``uses`` (Python regular expressions that find its uses
in a lesson's prose), ``meaning`` (one line), ``lesson`` (the id, in gpulab/lessons.py, of the lesson that defines
it). ``python -m gpulab.course.glossary --write`` renders the table of docs/glossary.md from this list.
"""

TERMS = [
    {
        "term": "SM",
        "uses": [r"\bSMs?\b", r"(?i)\bstreaming multiprocessors?\b"],
        "meaning": (
            "streaming multiprocessor: one of the GPU's independent processors (132 on an H100), each with "
            "its own registers, shared memory / L1 and tensor cores"
        ),
        "lesson": "00",
    },
    {
        "term": "warp",
        "uses": [r"\bwarps?\b"],
        "meaning": (
            "32 threads that execute one instruction together; an SM switches between resident warps every "
            "cycle to hide memory latency"
        ),
        "lesson": "00",
    },
    {
        "term": "program / thread block",
        "uses": [r"\bprograms?\b", r"(?i)\bthread[- ]blocks?\b"],
        "meaning": (
            "Triton's unit of work (CUDA's block): one instance of a kernel running on one SM, for a tile of the output"
        ),
        "lesson": "00",
    },
    {
        "term": "CTA",
        "uses": [r"\bCTAs?\b"],
        "meaning": (
            "cooperative thread array: the hardware's name for a thread block (a Triton program), the threads"
            " that share one SM's shared memory"
        ),
        "lesson": "04",
    },
    {
        "term": "wave",
        "uses": [r"\bwaves?\b"],
        "meaning": (
            "the set of programs that run at the same time across all SMs; a grid of 133 programs on 132 SMs "
            "takes two waves"
        ),
        "lesson": "02",
    },
    {
        "term": "HBM",
        "uses": [r"\bHBM\d?e?\b"],
        "meaning": "high-bandwidth memory: the GPU's device memory (80 GB at about 3 TB/s on an H100)",
        "lesson": "00",
    },
    {
        "term": "L2",
        "uses": [r"\bL2\b"],
        "meaning": "the chip-wide cache between the SMs and HBM (50 MB on an H100)",
        "lesson": "00",
    },
    {
        "term": "shared memory",
        "uses": [r"(?i)\bshared memory\b", r"\bSMEM\b"],
        "meaning": "each SM's scratchpad (up to 228 KB on an H100), which a program reads and writes explicitly",
        "lesson": "00",
    },
    {
        "term": "arithmetic intensity",
        "uses": [r"(?i)\b(?:arithmetic )?intensity\b"],
        "meaning": (
            "FLOPs per byte moved from memory; below the ridge point (peak FLOP/s / bandwidth) a kernel is memory-bound"
        ),
        "lesson": "00",
    },
    {
        "term": "roofline",
        "uses": [r"(?i)\broofline\b"],
        "meaning": "the plot of attainable FLOP/s against intensity: min(peak, bandwidth x intensity)",
        "lesson": "01",
    },
    {
        "term": "tensor cores",
        "uses": [r"(?i)\btensor[- ]cores?\b"],
        "meaning": "the SM's matrix units, which multiply small tiles of bf16/fp16/tf32 in one instruction",
        "lesson": "00",
    },
    {
        "term": "wgmma",
        "uses": [r"\bwgmma\b"],
        "meaning": (
            "Hopper's warpgroup matrix product: four warps issue one asynchronous tensor-core product that "
            "reads its operands from shared memory"
        ),
        "lesson": "02",
    },
    {
        "term": "TMA",
        "uses": [r"\bTMA\b"],
        "meaning": (
            "Hopper's tensor memory accelerator: copies a tile between global and shared memory in one "
            "instruction, described by a tensor descriptor"
        ),
        "lesson": "02",
    },
    {
        "term": "warp specialization",
        "uses": [r"(?i)\bwarp[- ]speciali[sz](?:ation|ed)\b"],
        "meaning": (
            "some warps only load (producers) while others only compute (consumers), so copies and products overlap"
        ),
        "lesson": "05",
    },
    {
        "term": "kWidth",
        "uses": [r"\bkWidth\b"],
        "meaning": (
            "how many consecutive k elements of a tensor-core operand one thread holds in registers; a "
            "mismatch between producer and consumer forces register shuffles"
        ),
        "lesson": "06",
    },
    {
        "term": "persistent kernel",
        "uses": [r"(?i)\bpersistent (?:kernels?|RNNs?)\b"],
        "meaning": (
            "a kernel whose programs stay resident for the whole job (a whole sequence of RNN steps), keeping"
            " weights on chip between steps"
        ),
        "lesson": "01",
    },
    {
        "term": "grid barrier",
        "uses": [r"(?i)\bgrid[- ](?:wide )?barriers?\b"],
        "meaning": (
            "a point every program of a persistent kernel must reach before any continues; needs all programs"
            " resident at once"
        ),
        "lesson": "07",
    },
    {
        "term": "CUDA graph",
        "uses": [r"(?i)\bCUDA graphs?\b"],
        "meaning": "a recorded sequence of launches replayed with one call, removing the host's per-launch cost",
        "lesson": "03",
    },
    {
        "term": "online softmax",
        "uses": [r"(?i)\bonline (?:softmax|form|normali[sz]er)\b", r"(?i)^online$"],
        "meaning": (
            "softmax computed in one pass over blocks, rescaling the running sum when the running maximum grows"
        ),
        "lesson": "04",
    },
    {
        "term": "FLOP",
        "uses": [r"\bT?FLOPs?\b", r"\bT?FLOP/s\b"],
        "meaning": "a floating-point operation (a multiply-add is 2); TFLOP/s: trillions of them per second",
        "lesson": "00",
    },
    {
        "term": "mbarrier",
        "uses": [r"\bmbarriers?\b"],
        "meaning": (
            "a barrier object in shared memory that counts arrivals and bytes (of a TMA copy); warps wait on its phase"
        ),
        "lesson": "05",
    },
    {
        "term": "PTX",
        "uses": [r"\bPTX\b"],
        "meaning": "NVIDIA's virtual instruction set: what Triton emits, compiled to the GPU's machine code by ptxas",
        "lesson": "05",
    },
    {
        "term": "ptxas",
        "uses": [r"\bptxas\b"],
        "meaning": "NVIDIA's assembler that compiles PTX to SASS, choosing registers and scheduling instructions",
        "lesson": "05",
    },
    {
        "term": "SASS",
        "uses": [r"\bSASS\b"],
        "meaning": "the GPU's machine code, the instructions the SM runs (what a profiler and `cuobjdump` show)",
        "lesson": "06",
    },
    {
        "term": "HMMA",
        "uses": [r"\bHMMA\b"],
        "meaning": "the SASS tensor-core instruction of one warp's matrix multiply-accumulate (`mma.sync` in PTX)",
        "lesson": "06",
    },
    {
        "term": "STS.128",
        "uses": [r"\bSTS\.128\b", r"\bSTS\b"],
        "meaning": "a SASS store to shared memory of 128 bits per thread (LDS/STS: shared-memory load and store)",
        "lesson": "06",
    },
    {
        "term": "setmaxnreg",
        "uses": [r"\bsetmaxnreg\b"],
        "meaning": (
            "a Hopper instruction that moves a warpgroup's register budget up or down, so consumer warps get "
            "more registers than producers"
        ),
        "lesson": "05",
    },
    {
        "term": "swizzle",
        "uses": [r"(?i)\bswizzl(?:e|ed|es|ing)\b"],
        "meaning": (
            "a permutation of a tile's layout in shared memory (addresses XOR-ed) so that threads reading a "
            "column hit different banks"
        ),
        "lesson": "05",
    },
    {
        "term": "ldmatrix",
        "uses": [r"\bldmatrix\b"],
        "meaning": (
            "one warp instruction that loads 8x8 tiles from shared memory into the registers a tensor-core "
            "product expects"
        ),
        "lesson": "07",
    },
    {
        "term": "CTA barrier",
        "uses": [r"(?i)\bCTA[- ]barriers?\b", r"__syncthreads"],
        "meaning": (
            "a barrier among the warps of one CTA (`bar.sync`, `__syncthreads`, `tl.debug_barrier`); it does not "
            "reach other CTAs"
        ),
        "lesson": "06",
    },
    {
        "term": "thread-block cluster",
        "uses": [
            r"(?i)\bthread[- ]block clusters?\b",
            r"(?i)\bCTA clusters?\b",
            r"(?i)\bclusters? of (?:CTAs|programs|thread blocks)\b",
        ],
        "meaning": (
            "on Hopper, up to 16 CTAs scheduled together on neighbouring SMs, which can read each other's shared memory"
        ),
        "lesson": "07",
    },
    {
        "term": "distributed shared memory",
        "uses": [r"(?i)\bdistributed shared memory\b", r"\bDSMEM\b"],
        "meaning": "the shared memory of a cluster's CTAs, addressable by every CTA of the cluster",
        "lesson": "07",
    },
    {
        "term": "occupancy",
        "uses": [r"(?i)\boccupancy\b"],
        "meaning": (
            "how many warps (or programs) are resident on an SM at once, limited by registers, shared memory "
            "and the SM's slots"
        ),
        "lesson": "07",
    },
    {
        "term": "wavefront",
        "uses": [r"(?i)\bwave[- ]?fronts?\b"],
        "meaning": (
            "a schedule that runs, at once, every cell (layer, time step) whose inputs are ready: the anti-"
            "diagonal of a stacked RNN"
        ),
        "lesson": "03",
    },
    {
        "term": "NCCL",
        "uses": [r"\bNCCL\b"],
        "meaning": (
            "NVIDIA's collective communication library: all-reduce, all-gather and reduce-scatter between GPUs"
        ),
        "lesson": "09",
    },
    {
        "term": "all-reduce",
        "uses": [r"(?i)\ball[- ]reduces?\b"],
        "meaning": "a collective that sums a tensor across all processes and gives every process the sum",
        "lesson": "09",
    },
    {
        "term": "DDP",
        "uses": [r"\bDDP\b", r"DistributedDataParallel"],
        "meaning": (
            "PyTorch's DistributedDataParallel: one model copy per GPU, gradients all-reduced during the backward"
        ),
        "lesson": "09",
    },
    {
        "term": "FSDP2",
        "uses": [r"\bFSDP2?\b", r"\bfully_shard\b"],
        "meaning": (
            "PyTorch's fully sharded data parallel (`fully_shard`): parameters, gradients and optimizer state "
            "split across GPUs, gathered per layer"
        ),
        "lesson": "09",
    },
    {
        "term": "bpb",
        "uses": [r"\bbpb\b", r"(?i)\bbits per byte\b"],
        "meaning": "bits per byte: a language model's loss in bits, per byte of text, comparable across tokenizers",
        "lesson": "08",
    },
    {
        "term": "logsumexp",
        "uses": [r"(?i)\blog[- ]?sum[- ]?exp\b", r"\bLSE\b"],
        "meaning": (
            "log(sum(exp(x))), computed as max + log(sum(exp(x - max))); the forward saves it so the backward"
            " recomputes softmax"
        ),
        "lesson": "04",
    },
    {
        "term": "tile",
        "uses": [r"(?i)\btiles?\b", r"(?i)\btiled\b", r"(?i)\btiling\b"],
        "meaning": "a block of a matrix (a few rows by a few columns) that one program loads, computes on and stores",
        "lesson": "00",
    },
    {
        "term": "autotune",
        "uses": [r"(?i)\bauto-?tun(?:e|ed|es|er|ing)\b"],
        "meaning": (
            "timing several configurations of a kernel (tile sizes, warps, stages) on the real shape and "
            "keeping the fastest"
        ),
        "lesson": "02",
    },
    {
        "term": "ridge point",
        "uses": [r"(?i)\bridge(?: point)?\b"],
        "meaning": (
            "the intensity P/B where a GPU's compute roof meets its memory roof; left of it a kernel is memory-bound"
        ),
        "lesson": "00",
    },
    {
        "term": "memory-bound",
        "uses": [r"(?i)\bmemory[- ]bound\b"],
        "meaning": (
            "a kernel whose time is set by the bytes it moves (its intensity is below the ridge point), not "
            "by its FLOPs"
        ),
        "lesson": "00",
    },
    {
        "term": "compute-bound",
        "uses": [r"(?i)\bcompute[- ]bound\b"],
        "meaning": "a kernel whose time is set by its arithmetic (its intensity is above the ridge point)",
        "lesson": "01",
    },
    {
        "term": "grid",
        "uses": [r"\bgrids?\b"],
        "meaning": "all the programs of one kernel launch, spread over the SMs",
        "lesson": "00",
    },
    {
        "term": "coalesced",
        "uses": [r"(?i)\bcoalesc(?:ed|ing|e)\b"],
        "meaning": (
            "a warp's 32 loads of neighbouring addresses, merged by the hardware into a few wide memory transactions"
        ),
        "lesson": "00",
    },
    {
        "term": "bf16",
        "uses": [r"\bbf16\b", r"\bbfloat16\b"],
        "meaning": "the 2-byte float that keeps fp32's exponent range with 8 bits of mantissa",
        "lesson": "00",
    },
    {
        "term": "FMA",
        "uses": [r"\bFMAs?\b"],
        "meaning": "fused multiply-add: a*b + c in one instruction, rounded once",
        "lesson": "01",
    },
    {
        "term": "TF32",
        "uses": [r"\bTF32\b"],
        "meaning": "fp32 inputs rounded to a 10-bit mantissa inside the tensor core, products accumulated in fp32",
        "lesson": "01",
    },
    {
        "term": "GEMM",
        "uses": [r"\bGEMMs?\b"],
        "meaning": "general matrix multiply (the BLAS name): C = AB",
        "lesson": "01",
    },
    {
        "term": "cuBLAS",
        "uses": [r"\bcuBLAS(?:Lt)?\b"],
        "meaning": "NVIDIA's matrix-multiply library, behind torch.matmul",
        "lesson": "01",
    },
    {
        "term": "Hopper",
        "uses": [r"\bHopper\b"],
        "meaning": "the H100's GPU architecture (sm_90), the first with TMA, wgmma and thread-block clusters",
        "lesson": "02",
    },
    {
        "term": "stages",
        "uses": [r"\bnum_stages\b", r"(?i)\b(?:\d|two|three|four|more|fewer) stages\b"],
        "meaning": "shared-memory buffers that let the next K-steps' tiles load while the current ones multiply",
        "lesson": "02",
    },
    {
        "term": "cuDNN",
        "uses": [r"\bcuDNN\b"],
        "meaning": (
            "NVIDIA's library of deep-learning kernels (behind torch.nn.LSTM and one of SDPA's attention backends)"
        ),
        "lesson": "03",
    },
    {
        "term": "CUDA stream",
        "uses": [r"(?i)\bCUDA streams?\b", r"\bstreams?\b"],
        "meaning": "a queue of GPU work that runs in order; work on two streams may overlap",
        "lesson": "03",
    },
    {
        "term": "eager",
        "uses": [r"(?i)\beager(?:ly)?\b"],
        "meaning": "each operation launched from Python as the code reaches it (no graph, no compilation)",
        "lesson": "03",
    },
    {
        "term": "SDPA",
        "uses": [r"\bSDPA\b", r"scaled_dot_product_attention"],
        "meaning": (
            "PyTorch's scaled_dot_product_attention, which picks one of several backends (FlashAttention-2, "
            "cuDNN, memory-efficient, math)"
        ),
        "lesson": "04",
    },
    {
        "term": "RoPE",
        "uses": [r"\bRoPE\b"],
        "meaning": "rotary position embedding: each query and key rotated by an angle that grows with its position",
        "lesson": "08",
    },
    {
        "term": "collective",
        "uses": [r"(?i)\bcollectives?\b"],
        "meaning": "an operation that every process calls together (all-reduce, all-gather, reduce-scatter)",
        "lesson": "09",
    },
    {
        "term": "all-gather",
        "uses": [r"(?i)\ball[- ]gathers?\b"],
        "meaning": "a collective that gives every process the concatenation of every process's tensor",
        "lesson": "09",
    },
    {
        "term": "reduce-scatter",
        "uses": [r"(?i)\breduce[- ]scatters?\b"],
        "meaning": "a collective that sums tensors across processes and leaves each process one slice of the sum",
        "lesson": "09",
    },
    {
        "term": "torchrun",
        "uses": [r"\btorchrun\b"],
        "meaning": "PyTorch's launcher: starts one process per GPU and gives each its rank and the world size",
        "lesson": "09",
    },
    {
        "term": "NVLink",
        "uses": [r"\bNVLink\b"],
        "meaning": "the links between the GPUs of one machine (hundreds of GB/s per direction)",
        "lesson": "09",
    },
]
