"""Every public callable that takes user input has a bad-input test (issue 15): a callable in a module's ``__all__``,
defined there and taking arguments, must be named in one of the bad-input test files, or be listed in ALLOWED with
the reason it takes no user input. A new public function without a bad-input test fails here."""

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import gpulab

TESTS = Path(__file__).resolve().parent
BAD_INPUT_FILES = ["test_check.py", "test_runtime.py", "test_validation_properties.py", "test_sources.py"]

_INTERNAL = "internal: called by the package with inputs it has already validated"
_RECORD = "a record type the package constructs (or a dataclass whose fields its users validate)"
_CLI = "a command-line entry: argparse validates its arguments"
_STORED = "reads the package's own stored records or results, built by validated code"
_AUTHOR = "a course author's tool over the repository's own sources (paths from source_paths())"
_SITE = "the course website's build and check tools, over the repository's own syllabus, sources and built site"
ALLOWED = {
    "gpulab.course.listing.code_part": "a line of a kernel's source without its comment: lines the course's own "
    "listing and hint checks read from the package and the solutions, no user input",
    **dict.fromkeys(
        [
            f"gpulab.rnn.fused.gluon_ops.{n}"
            for n in (
                "tanh",
                "sigmoid",
                "r_offsets",
                "h_pointers",
                "gate_inputs",
                "rt_tile",
                "push_share",
                "gather_shares",
                "grid_arrive",
                "grid_wait",
                "barrier_base",
                "grid_barrier",
                "clock_after",
                "globaltimer_after",
                "keep2",
                "keep3",
                "barrier_start",
            )
        ],
        "Gluon device functions: called only inside version 6's kernels, on tiles the kernels built",
    ),  # fmt: skip
    **dict.fromkeys(
        [f"gpulab.gluon_compat.{n}" for n in ("async_load", "async_store", "reinterpret")],
        "Gluon builtins: called only inside the Gluon kernels, on descriptors and buffers the kernels built",
    ),
    **dict.fromkeys([f"gpulab.gluon_compat.{n}" for n in ("triton_minor", "untested", "warn_once")], _INTERNAL),
    **dict.fromkeys(
        [
            "gpulab.attention.v3.launch.BoundedCache",
            "gpulab.attention.v3.launch.tma_key",
            "gpulab.attention.v3.launch.RawLaunch",
        ],
        "version 3's launch cache: built and keyed by the forward from inputs the plan has validated",
    ),  # fmt: skip
    "gpulab.attention.v3.backward_launch.BackwardPlan": "version 3's backward launch plan: built by "
    "v3.backward.attention_backward after its checks (its bad inputs are tested there)",
    "gpulab.attention.v3.producer.producer": "a Gluon partition of version 3's forward kernel: called only inside "
    "the kernel, with the kernel's own descriptors, buffers and barriers",
    "gpulab.attention.v3.backward_dq.dq_writer": "a Gluon partition of version 3's backward kernel: called only "
    "inside the kernel, with the kernel's own buffers",
    **dict.fromkeys(
        [
            "gpulab.attention.v3.backward_dq.dq_writer_persistent",
            "gpulab.attention.v3.backward_dq.add_block",
            "gpulab.attention.v3.backward_dq.dq_block_done",
            *(
                f"gpulab.attention.v3.backward_pair.{n}"
                for n in (
                    "kv_operand",
                    "stats_buffers",
                    "stats_load",
                    "stats_slot",
                    "stats_store",
                    "scores",
                    "pair",
                    "pair_ds",
                    "pair_rest",
                    "dq_product",
                    "dq_add",
                    "store_dkdv",
                    "first_query",
                    "query_range",
                    "visit",
                    "visit_count",
                    "next_visit_rows",
                    "window_mask",
                    "persistent_count",
                    "persistent_tile",
                    "stats_row",
                    "seq_bounds",
                    "key_start",
                    "varlen_mask",
                )
            ),
            "gpulab.attention.v3.backward_persistent.persistent_backward",
        ],
        "a Gluon function of version 3's backward kernel: called only inside the kernel, with its own buffers",
    ),  # fmt: skip
    **dict.fromkeys(["gpulab.codesign.gemm_model.GemmConstants", "gpulab.course.one_record.Display"], _RECORD),
    **dict.fromkeys(
        ["gpulab.course.method.Dot", "gpulab.course.method.MemOp", "gpulab.course.speed.SpeedTask"],
        "a record the package builds (from TTIR, or the table of timed tasks), not a call a user makes",
    ),
    **dict.fromkeys(
        [
            "gpulab.course.book.lesson_modules",
            "gpulab.course.book.other_modules",
            "gpulab.course.book.record_banner",
            "gpulab.course.book.readme_sections",
            "gpulab.course.book.glossary",
            "gpulab.course.book.generate",
            "gpulab.course.book_offline.external_resources",
            "gpulab.course.book_offline.site_external_resources",
            "gpulab.course.book_check.serve",
            "gpulab.course.book_check.check_site",
        ],
        _SITE,
    ),
    **dict.fromkeys(["gpulab.course.book.main", "gpulab.course.book_check.main"], _CLI),
    **dict.fromkeys(
        [
            "gpulab.attention.windows.mask_flags",
            "gpulab.attention.varlen.VarlenPlan",
            "gpulab.attention.varlen.VarlenFunction",
        ],
        _INTERNAL,
    ),  # fmt: skip
    "gpulab.attention.varlen.AuxRequest": _RECORD,
    "gpulab.attention.measure.features_bench.features": "a benchmark part: its one argument is the progress wrapper",
    "gpulab.attention.measure.short_bench.short": "a benchmark part: its arguments are the progress wrapper and "
    "the cases (dicts like CASES')",
    "gpulab.attention.measure.short_bench.table": "the part's printout of its own records (bench.result_list checks "
    "them)",
    "gpulab.attention.measure.short_bench.best": "the part's summary of its own records (bench.result_list checks "
    "them)",
    "gpulab.attention.measure.features_bench.varlen_grids": "a timing script: its one argument is the progress wrapper",
    "gpulab.rnn.fused.measure.lstm_grid.step_of": "the benchmark parts' training step of a module they built, no user "
    "input",
    "gpulab.rnn.fused.measure.lstm_grid.check_against_torch": "the benchmark parts' check of a module they built "
    "against nn.LSTM with its weights, no user input",
    "gpulab.rnn.fused.measure.lstm_grid.lstm_grid": "a benchmark part: its arguments are the progress wrapper and a "
    "time budget in seconds",
    "gpulab.rnn.fused.measure.lstm_tiles.lstm_tiles": "a benchmark part: its arguments are the progress wrapper and a "
    "time budget in seconds",
    "gpulab.bench.index.read_index": _STORED,
    "gpulab.bench.index.entries": _STORED,
    "gpulab.gluon_compat.tma_descriptor_encoder": "internal: called by version 3's launch with Triton's driver utils",
    "gpulab.rnn.api.zero_states": "internal: flashrnn's and gpulab.rnn.layer's zero initial states of a shape they "
    "checked (flashrnn's bad inputs: tests/rnn/test_rnn_bad_input.py)",
    **dict.fromkeys(
        [
            f"gpulab.rnn.packed.{n}"
            for n in ("flat_index", "unpack", "repack", "reverse_index", "time_gather", "last_steps")
        ]
        + ["gpulab.rnn.checkpoint.suffix", "gpulab.rnn.checkpoint.convert_legacy"]
        + ["gpulab.rnn.projected.projected_lstm"]
        + ["gpulab.rnn.layer.lstm_layer", "gpulab.rnn.layer.layer_loops"],
        "internal: called by gpulab.rnn.LSTM after its checks (its bad inputs are tested in "
        "tests/rnn/test_module_nnlstm_bad_input.py)",
    ),
    **dict.fromkeys(
        [
            "gpulab.attention.plan.run_backward",
            "gpulab.attention.plan.backward_kind",
            "gpulab.attention.plan.two_kernel_backward",
            "gpulab.attention.experiments.v1_backward_fused.fused_backward",
            "gpulab.attention.experiments.v2_backward.V2Backward",
            "gpulab.attention.experiments.v2_backward.v2_backward",
            "gpulab.attention.sm90.capability",
            "gpulab.attention.sm90.compile_for_sm90",
            "gpulab.attention.sm90.ttgir_in_fresh_process",
            "gpulab.attention.v1.backward.backward_launches",
            "gpulab.attention.plan.run_forward",
            "gpulab.attention.v1.forward.forward_launch",
            "gpulab.attention.v2.forward.forward_v2_launch",
            "gpulab.attention.experiments.v2_backward.backward_v2_launches",
            "gpulab.attention.experiments.v1_backward_fused.FusedBackward",
            "gpulab.attention.experiments.v1_backward_fused.preprocess_launch",
            "gpulab.attention.experiments.v1_backward_fused.fused_backward_launch",
            "gpulab.attention.experiments.v1_backward_fused.use_fused",
            "gpulab.attention.function.FlashAttentionFunction",
            "gpulab.attention.rope.QKVHeadsFunction",
            "gpulab.attention.ops.flash_attention_op",
            "gpulab.attention.plan.forward_plan",
            "gpulab.attention.inputs.check_inputs",
            "gpulab.rnn.api.check_inputs",
            "gpulab.attention.plan.backward_plan",
            "gpulab.attention.configs.autotuned_config",
            "gpulab.bench.records.kernel_resources",
            "gpulab.check.poison_",
            "gpulab.check.new_output",
            "gpulab.launch.Launch",
            "gpulab.launch.direct_stream",
            "gpulab.launch.cached_launch",
            "gpulab.launch.aligned",
            "gpulab.launch.in_order",
            "gpulab.lazy.attributes",
            "gpulab.memory.kernels.block_size",
            "gpulab.memory.measure.check_progress",
            "gpulab.memory.plots.check_axes",
            "gpulab.rnn.api.backend_name",
            "gpulab.rnn.backends.alternating.alternating_forward",
            "gpulab.rnn.backends.alternating.alternating_rnn_gradients",
            "gpulab.rnn.backends.autograd.TritonRNN",
            "gpulab.rnn.fused.plan.fused_forward",
            "gpulab.rnn.fused.plan.single_sm_forward",
            "gpulab.rnn.fused.plan.single_sm_gradients",
            "gpulab.rnn.fused.plan.problem_loops",
            "gpulab.rnn.fused.plan.saved_gates_dtype",
            "gpulab.rnn.fused.versions.launch",
            "gpulab.rnn.fused.backward.fused_rnn_backward",
            "gpulab.rnn.fused.backward.fused_rnn_gradients",
            "gpulab.rnn.fused.backward.pieces",
            "gpulab.rnn.fused.forward.fused_rnn_forward",
            "gpulab.rnn.fused.split.split_rnn_forward",
            "gpulab.rnn.fused.backward.per_gate",
            "gpulab.rnn.fused.split_backward.split_rnn_backward",
            "gpulab.rnn.fused.split_backward.split_rnn_gradients",
            "gpulab.rnn.fused.forward.saved_dtype",
            "gpulab.rnn.fused.tiles.fast_activations",
            "gpulab.rnn.backends.parameter_grads.previous_h_ones",
            "gpulab.rnn.backends.parameter_grads.gate_products",
            "gpulab.rnn.backends.parameter_grads.split_products",
            "gpulab.rnn.backends.parameter_grads.parameter_grads",
            "gpulab.rnn.backends.parameter_grads.small_parameter_grads",
            "gpulab.rnn.backends.parameter_grads.step_products",
            "gpulab.rnn.backends.parameter_grads.step_splits",
            "gpulab.rnn.backends.parameter_grads.input_gate_grads",
            "gpulab.rnn.backends.parameter_grads.gate_gradients_to_parameters",
            "gpulab.rnn.backends.parameter_grads.one_launch",
            "gpulab.rnn.backends.vanilla.vanilla_forward",
            "gpulab.rnn.ops.rnn_op",
            "gpulab.rnn.ops.lstm_layer_op",
            "gpulab.rnn.ladder.benchmark.check_outputs",
            "gpulab.rnn.ladder.benchmark.math_floor_ms",
            "gpulab.rnn.ladder.plot.short_dtype",
            "gpulab.roofline.roofs.resolve",
            "gpulab.roofline.roofs.rate_of",
            "gpulab.roofline.roofs.spec_value",
            "gpulab.roofline.roofs.rate_text",
            "gpulab.runtime.pick",
            "gpulab.runtime.stream",
        ],
        _INTERNAL,
    ),
    **dict.fromkeys(
        [
            "gpulab.attention.plan.Plan",
            "gpulab.bench.timing.Timing",
            "gpulab.codesign.configs.TransformerConfig",
            "gpulab.codesign.configs.LSTMConfig",
            "gpulab.codesign.configs.RuleCheck",
            "gpulab.codesign.gemm_model.GemmPrediction",
            "gpulab.distributed.train.TrainConfig",
            "gpulab.distributed.train.TrainResult",
            "gpulab.hardware.GPUSpec",
            "gpulab.rnn.functions.RNNFunction",
            "gpulab.rnn.fused.tiling.FusedTiling",
            "gpulab.rnn.fused.split_tiling.SplitTiling",
            "gpulab.rnn.fused.plan.Plan",
            "gpulab.roofline.plotting.Placement",
            "gpulab.tasks.data.Task",
            "gpulab.tasks.training.TrainLog",
            "gpulab.traffic.Counts",
            "gpulab.traffic.Traffic",
        ],
        _RECORD,
    ),
    **dict.fromkeys(
        [
            "gpulab.course.readme.main",
            "gpulab.distributed.benchmark.main",
            "gpulab.distributed.train.main",
            "gpulab.distributed.verify.main",
            "gpulab.rnn.fused.measure.sass.main",
        ],
        _CLI,
    ),
    **dict.fromkeys(
        [
            "gpulab.course.sources.read_source",
            "gpulab.course.sources.notebook_text",
            "gpulab.course.readme.prose_figures",
        ],
        _AUTHOR,
    ),
    **dict.fromkeys(["gpulab.course.figures.main"], _CLI),
    **dict.fromkeys(
        [
            "gpulab.attention.measure.report.stored",
            "gpulab.attention.measure.report.stored_sweep",
            "gpulab.attention.measure.report.stored_cs336",
            "gpulab.attention.measure.report.stored_fused",
        ],
        _STORED,
    ),
    **dict.fromkeys(
        [
            "gpulab.course.prose.offenders",
            "gpulab.course.readme.render",
            "gpulab.rnn.ladder.benchmark.same_mode_summary",
            "gpulab.rnn.ladder.benchmark.mode_ms",
            "gpulab.traffic.stored",
            "gpulab.traffic.plot_rows",
        ],
        _STORED,
    ),
}


def public_callables() -> list[str]:
    """``module.name`` of every callable in a gpulab module's ``__all__`` that is defined there and takes arguments."""
    out = []
    for info in pkgutil.walk_packages(gpulab.__path__, "gpulab."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name, None)
            if not callable(obj) or getattr(obj, "__module__", None) != info.name:
                continue
            if inspect.isclass(obj) and issubclass(obj, BaseException):
                continue
            try:
                if not inspect.signature(obj).parameters:
                    continue
            except (TypeError, ValueError):
                pass
            out.append(f"{info.name}.{name}")
    return out


def _bad_input_text() -> str:
    files = [
        p
        for p in TESTS.rglob("test_*.py")
        if ("bad_input" in p.name or p.name in BAD_INPUT_FILES) and p.name != Path(__file__).name
    ]  # not this file: its allow-list names every callable it excuses
    return "\n".join(p.read_text() for p in files)


def test_every_public_callable_has_a_bad_input_test_or_a_reason():
    text = _bad_input_text()
    missing = [
        q
        for q in public_callables()
        if q not in ALLOWED and not re.search(rf"\b{re.escape(q.rpartition('.')[2])}\b", text)
    ]
    assert not missing, (
        "public callables without a bad-input test (add one to a tests/**/test_*bad_input*.py table, or list the "
        f"callable in ALLOWED with the reason it takes no user input): {missing}"
    )


def test_the_allow_list_names_only_what_exists():
    stale = sorted(set(ALLOWED) - set(public_callables()))
    assert not stale, f"ALLOWED names callables that are no longer public: {stale}"


def test_the_audit_sees_the_main_entry_points():
    found = set(public_callables())
    main = {"gpulab.attention.function.flash_attention", "gpulab.rnn.api.flashrnn", "gpulab.check.assert_close"}
    assert main <= found
