"""Every public callable of gpulab.bench refuses bad input with the argument's name in the message."""

import math

import pytest
import torch

from gpulab import bench
from gpulab.bench import Result

ok = lambda: None  # noqa: E731


def _benchmark(**overrides):
    fields = dict(
        lesson="04",
        name="op",
        cases=[{"n": 3}],
        inputs=lambda n: (torch.ones(n),),
        providers={"a": lambda x: x * 2},
        reference=lambda x: x * 2,
    )
    fields.update(overrides)
    return bench.Benchmark(**fields)


def _result(**kw):
    return Result(**{"lesson": "00", "case": "c", "ms": 1.0, **kw})


BAD = [
    # (id, call, error type, words the message must contain)
    ("time_callable rep_ms=0", lambda: bench.time_callable(ok, rep_ms=0), ValueError, "rep_ms"),
    ("time_callable rep_ms<0", lambda: bench.time_callable(ok, rep_ms=-5), ValueError, "rep_ms"),
    ("time_callable rep_ms=nan", lambda: bench.time_callable(ok, rep_ms=math.nan), ValueError, "rep_ms"),
    ("time_callable warmup_ms<0", lambda: bench.time_callable(ok, warmup_ms=-1), ValueError, "warmup_ms"),
    ("time_callable min_reps=0", lambda: bench.time_callable(ok, min_reps=0), ValueError, "min_reps"),
    ("time_callable min_reps=2.5", lambda: bench.time_callable(ok, min_reps=2.5), TypeError, "min_reps"),
    ("time_callable max<min", lambda: bench.time_callable(ok, min_reps=5, max_reps=2), ValueError, "max_reps"),
    ("time_callable flush_l2=1", lambda: bench.time_callable(ok, flush_l2=1), TypeError, "flush_l2"),
    ("time_callable fn=3", lambda: bench.time_callable(3), TypeError, "fn"),
    ("time_callable rotate=[]", lambda: bench.time_callable(ok, rotate=[]), ValueError, "rotate"),
    ("time_callable rotate=5", lambda: bench.time_callable(ok, rotate=5), TypeError, "rotate"),
    ("wall_time rep_ms=0", lambda: bench.wall_time(ok, rep_ms=0), ValueError, "rep_ms"),
    ("wall_time repeats=0", lambda: bench.wall_time(ok, repeats=0), ValueError, "repeats"),
    ("wall_time repeats=2.0", lambda: bench.wall_time(ok, repeats=2.0), TypeError, "repeats"),
    ("wall_time max_calls=-1", lambda: bench.wall_time(ok, max_calls=-1), ValueError, "max_calls"),
    ("wall_time warmup_ms=inf", lambda: bench.wall_time(ok, warmup_ms=math.inf), ValueError, "warmup_ms"),
    ("CapturedStep fn=3", lambda: bench.CapturedStep(3), TypeError, "fn"),
    ("measure rep_ms=0", lambda: bench.measure(ok, lesson="00", case="c", rep_ms=0), ValueError, "rep_ms"),
    ("measure wall_clock=1", lambda: bench.measure(ok, lesson="00", case="c", wall_clock=1), TypeError, "wall_clock"),
    ("record flops<0", lambda: bench.record(lesson="00", case="c", flops=-1), ValueError, "flops"),
    ("record bytes=nan", lambda: bench.record(lesson="00", case="c", bytes=math.nan), ValueError, "bytes"),
    ("Result ms<0", lambda: _result(ms=-1.0), ValueError, "ms"),
    ("Result ms=inf", lambda: _result(ms=math.inf), ValueError, "ms"),
    ("Result ms='fast'", lambda: _result(ms="fast"), TypeError, "ms"),
    ("Result ms=True", lambda: _result(ms=True), TypeError, "ms"),
    ("Result wall_ms<0", lambda: _result(wall_ms=-0.5), ValueError, "wall_ms"),
    ("Result params=list", lambda: _result(params=[1]), TypeError, "params"),
    ("Result.time clock", lambda: _result().time("gpu"), ValueError, "clock"),
    ("Result.rate metric", lambda: _result().rate("flops"), ValueError, "metric"),
    ("Result.from_dict list", lambda: Result.from_dict([1]), TypeError, "d must be a dict"),
    (
        "save dicts",
        lambda: bench.save([_result(), {"ms": 1}], "00", path="/nonexistent/x.jsonl"),
        TypeError,
        "results[1] is a dict",
    ),
    ("save one Result", lambda: bench.save(_result(), "00", path="/nonexistent/x.jsonl"), TypeError, "results"),
    ("save empty", lambda: bench.save([], "00"), ValueError, "results is empty"),
    ("save unknown lesson", lambda: bench.save([_result()], "99"), ValueError, "lesson='99'"),
    ("load gpu=3", lambda: bench.load("00", gpu=3), TypeError, "gpu"),
    ("load path=3", lambda: bench.load("00", path=3), TypeError, "path must be a file path"),
    ("save path=3", lambda: bench.save([_result()], "00", path=3), TypeError, "path must be a file path"),
    ("results_dir root=3", lambda: bench.results_dir(3), TypeError, "root must be a folder path"),
    ("newest of an int", lambda: bench.newest(3), TypeError, "files must be a list of record file paths"),
    ("record_files of an int", lambda: bench.record_files(3), TypeError, "folder must be a folder path"),
    ("record_files gpu=5", lambda: bench.record_files(".", gpu=5), TypeError, "gpu must be a GPU name"),
    ("record_files pattern=None", lambda: bench.record_files(".", pattern=None), TypeError, "pattern must be a glob"),
    ("newest of []", lambda: bench.newest([]), ValueError, "files is empty"),
    ("by_run of an int", lambda: bench.by_run(3), TypeError, "files must be a list of record file paths"),
    ("by_run of a dict", lambda: bench.by_run({"a.jsonl": 1}), TypeError, "files must be a list"),
    ("by_run part=''", lambda: bench.by_run([], part=""), TypeError, "part must be a record part"),
    ("newest part 3", lambda: bench.newest(["a-2026-01-01.jsonl"], part=3), TypeError, "part must be"),
    ("newest part ''", lambda: bench.newest(["a-2026-01-01.jsonl"], part=""), ValueError, "part must be"),
    ("newest of [3]", lambda: bench.newest([3]), TypeError, "files[0] is a int"),
    ("newest of a file", lambda: bench.newest(__file__), ValueError, "is a file, not a folder"),
    ("result_list one Result", lambda: bench.result_list("rs", _result()), TypeError, "got one Result; use [rs]"),
    ("result_list dict", lambda: bench.result_list("rs", {}), TypeError, "rs must be a list of gpulab.bench.Result"),
    ("result_list []", lambda: bench.result_list("rs", []), ValueError, "rs is empty"),
    ("result_list [1.0]", lambda: bench.result_list("rs", [_result(), 1.0]), TypeError, "rs[1] is a float 1.0"),
    ("table of strings", lambda: bench.table(["a"]), TypeError, "results[0]"),
    ("table columns=[1]", lambda: bench.table([_result()], columns=[1]), TypeError, "columns"),
    ("text_table ragged", lambda: bench.text_table(["a", "b"], [[1]]), ValueError, "rows[0]"),
    ("bar of dicts", lambda: bench.bar([{}]), TypeError, "results[0]"),
    ("line of dicts", lambda: bench.line([{}], x="n"), TypeError, "results[0]"),
    ("attention_flops batch<0", lambda: bench.attention_flops(-1, 1, 1, 1, 1), ValueError, "batch"),
    ("attention_flops heads=1.5", lambda: bench.attention_flops(1, 1.5, 1, 1, 1), TypeError, "heads"),
    ("attention_flops seq_q=2.0", lambda: bench.attention_flops(1, 1, 2.0, 1, 1), TypeError, "seq_q"),
    ("attention_flops seq_k<0", lambda: bench.attention_flops(1, 1, 1, -8, 1), ValueError, "seq_k"),
    ("attention_flops head_dim=True", lambda: bench.attention_flops(1, 1, 1, 1, True), TypeError, "head_dim"),
    ("attention_flops causal='no'", lambda: bench.attention_flops(1, 1, 1, 1, 1, causal="no"), TypeError, "causal"),
    ("attention_flops backward=1", lambda: bench.attention_flops(1, 1, 1, 1, 1, backward=1), TypeError, "backward"),
    ("unavailable('')", lambda: bench.unavailable(""), TypeError, "reason"),
    ("Benchmark lesson", lambda: _benchmark(lesson="99"), ValueError, "lesson='99'"),
    ("Benchmark name", lambda: _benchmark(name=""), TypeError, "name"),
    ("Benchmark cases=[]", lambda: _benchmark(cases=[]), ValueError, "cases"),
    ("Benchmark cases=dict", lambda: _benchmark(cases={"n": 3}), ValueError, "cases"),
    ("Benchmark cases=[3]", lambda: _benchmark(cases=[3]), TypeError, "cases[0]"),
    ("Benchmark providers={}", lambda: _benchmark(providers={}), ValueError, "providers"),
    ("Benchmark provider not callable", lambda: _benchmark(providers={"a": 3}), TypeError, "providers['a']"),
    ("Benchmark inputs", lambda: _benchmark(inputs=(1,)), TypeError, "inputs"),
    ("Benchmark check", lambda: _benchmark(check="close"), TypeError, "check"),
    ("Benchmark reference name", lambda: _benchmark(reference="sdpa"), ValueError, "reference='sdpa'"),
    ("Benchmark reference=3", lambda: _benchmark(reference=3), TypeError, "reference"),
    ("Benchmark flops<0", lambda: _benchmark(flops=-1.0), ValueError, "flops"),
    ("Benchmark bytes='x'", lambda: _benchmark(bytes="x"), TypeError, "bytes"),
    ("Benchmark rep_ms=0", lambda: _benchmark(rep_ms=0), ValueError, "rep_ms"),
    ("Benchmark warmup_ms<0", lambda: _benchmark(warmup_ms=-1), ValueError, "warmup_ms"),
    ("Benchmark check_inputs", lambda: _benchmark(check_inputs=3), TypeError, "check_inputs"),
    ("Benchmark on_mismatch", lambda: _benchmark(on_mismatch="warn"), ValueError, "on_mismatch='warn'"),
    ("Benchmark provider_params key", lambda: _benchmark(provider_params={"x": {}}), ValueError, "provider_params"),
    ("Benchmark provider_params value", lambda: _benchmark(provider_params={"a": 3}), TypeError, "provider_params"),
    ("graphed of 3", lambda: bench.graphed(3), TypeError, "fn must be"),
    ("graphed no_grad=1", lambda: bench.graphed(print, no_grad=1), TypeError, "no_grad"),
    ("run of a dict", lambda: bench.run([{}]), TypeError, "benchmarks[0]"),
    ("run timed=1", lambda: bench.run([_benchmark()], timed=1), TypeError, "timed"),
    ("run progress=3", lambda: bench.run([_benchmark()], progress=3), TypeError, "progress"),
    ("summary clock", lambda: bench.summary([_result(provider="a")], clock="host"), ValueError, "clock"),
    ("summary baseline", lambda: bench.summary([_result(provider="a")], baseline="b"), ValueError, "baseline='b'"),
    ("speedup provider", lambda: bench.speedup([_result(provider="a")], "x", over="a"), ValueError, "provider='x'"),
    ("speedup over", lambda: bench.speedup([_result(provider="a")], "a", over="y"), ValueError, "over='y'"),
    ("plot metric", lambda: bench.plot([_result()], x="n", metric="flops"), ValueError, "metric"),
    ("plot clock", lambda: bench.plot([_result()], x="n", clock="cpu"), ValueError, "clock"),
]


@pytest.mark.parametrize(("call", "error", "words"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_refused_naming_the_argument(call, error, words):
    with pytest.raises(error) as e:
        call()
    assert words in str(e.value)


def test_result_list_gives_a_list_and_may_allow_empty(tmp_path):
    r = _result()
    assert bench.result_list("results", (r, r)) == [r, r]
    assert bench.result_list("results", iter([]), allow_empty=True) == []
    with pytest.raises(FileNotFoundError, match="no records"):
        bench.newest(tmp_path)
