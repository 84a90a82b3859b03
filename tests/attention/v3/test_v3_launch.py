"""Version 3's cached launch on any machine: the bounded cache, the tensor-map key, and the raw launch's argument
list with a stand-in launcher (the real one needs a GPU: tests/attention/v3/test_v3_gpu.py)."""

import types

import pytest
import torch

from gpulab import gluon_compat
from gpulab.attention.v3 import configs, launch
from gpulab.attention.v3 import forward as v3

META = dict(swizzle=3, elem_size=2, elem_type=10, block_size=[1, 64, 128], fp4_padded=False)


def test_bounded_cache_hits_misses_and_evicts_the_least_recent():
    built = []
    cache = launch.BoundedCache(2)
    build = lambda key: lambda: built.append(key) or f"v{key}"  # noqa: E731
    assert cache.get("a", build("a")) == "va" and cache.get("a", build("a")) == "va"
    assert built == ["a"] and (cache.hits, cache.misses) == (1, 1)
    cache.get("b", build("b"))
    cache.get("a", build("a"))  # a is now the most recent
    cache.get("c", build("c"))  # evicts b
    assert len(cache) == 2 and "a" in cache and "c" in cache and "b" not in cache
    cache.get("b", build("b"))
    assert built == ["a", "b", "c", "b"]


def test_bounded_cache_keeps_nothing_when_build_raises():
    cache = launch.BoundedCache(4)
    with pytest.raises(ValueError):
        cache.get("x", lambda: (_ for _ in ()).throw(ValueError("bad input")))
    assert "x" not in cache and len(cache) == 0


@pytest.mark.parametrize("maxsize", [0, -1, 1.5, True, None])
def test_bounded_cache_bad_size(maxsize):
    with pytest.raises(ValueError, match="maxsize"):
        launch.BoundedCache(maxsize)


def test_tma_key_changes_with_every_input_of_the_map():
    base = launch.tma_key(1 << 20, (8, 1000, 128), (128000, 128, 1), META)
    assert base == launch.tma_key(1 << 20, [8, 1000, 128], [128000, 128, 1], dict(META))
    assert base != launch.tma_key(2 << 20, (8, 1000, 128), (128000, 128, 1), META)  # address
    assert base != launch.tma_key(1 << 20, (8, 1000, 128), (256000, 128, 1), META)  # strides
    assert base != launch.tma_key(1 << 20, (8, 999, 128), (127872, 128, 1), META)  # shape
    assert base != launch.tma_key(1 << 20, (8, 1000, 128), (128000, 128, 1), {**META, "block_size": [1, 128, 128]})
    assert base != launch.tma_key(1 << 20, (8, 1000, 128), (128000, 128, 1), {**META, "elem_type": 8})


def _raw(maxsize=8, layout="3.6"):
    calls, encoded = [], []
    run = types.SimpleNamespace(launch_cooperative_grid=False, launch_pdl=False)
    if layout == "3.7":  # Triton 3.7-3.9's CudaLauncher keeps what its C launcher parses the argument list by
        run.arg_annotations, run.kernel_signature = "annotations", b"signature"
    compiled = types.SimpleNamespace(
        metadata=types.SimpleNamespace(tensordesc_meta=[META, META]), function=11, packed_metadata=(4, 1), run=run,
    )  # fmt: skip

    def encode(ptr, shape, strides, meta):
        encoded.append((ptr, tuple(shape), tuple(strides)))
        return f"map@{ptr}"

    raw = launch.RawLaunch(compiled, lambda *a: calls.append(a), encode, launch.BoundedCache(maxsize))
    return raw, calls, encoded


def test_raw_launch_lays_out_arguments_as_tritons_launcher():
    raw, calls, _ = _raw()
    raw.launch(132, 7, [(4096, (8, 100, 128), (12800, 128, 1)), (8192, (8, 50, 128), (6400, 128, 1))], ("lse", 3))
    (args,) = calls
    assert args[:13] == (132, 1, 1, 7, 11, False, False, None, None, (4, 1), None, None, None)
    assert args[13:] == ("map@4096", 8, 100, 128, 12800, 128, 1, "map@8192", 8, 50, 128, 6400, 128, 1, "lse", 3)


def test_raw_launch_lays_out_arguments_as_triton_3_7s_launcher():
    """Triton 3.7 to 3.9: 15 fixed arguments (metadata before the hooks and scratch, then the annotations and the
    signature), the kernel's arguments as one list last (3.6's layout there raised 'takes exactly 16 arguments')."""
    raw, calls, _ = _raw(layout="3.7")
    raw.launch(132, 7, [(4096, (8, 100, 128), (12800, 128, 1)), (8192, (8, 50, 128), (6400, 128, 1))], ("lse", 3))
    (args,) = calls
    assert len(args) == 16
    assert args[:15] == (132, 1, 1, 7, 11, False, False, (4, 1), None, None, None, None, None, "annotations",
                         b"signature")  # fmt: skip
    assert args[15] == ["map@4096", 8, 100, 128, 12800, 128, 1, "map@8192", 8, 50, 128, 6400, 128, 1, "lse", 3]


def test_raw_launch_caches_maps_by_address_and_geometry():
    raw, _, encoded = _raw()
    descs = [(4096, (8, 100, 128), (12800, 128, 1)), (8192, (8, 100, 128), (12800, 128, 1))]
    raw.launch(1, 0, descs, ())
    raw.launch(1, 0, descs, ())
    assert len(encoded) == 2 and raw.cache.hits == 2  # same addresses: no new encoding
    raw.launch(1, 0, [(16384, *descs[0][1:]), descs[1]], ())  # a new address: one new map
    assert encoded[-1][0] == 16384 and len(encoded) == 3
    raw.launch(1, 0, [(4096, (8, 100, 128), (25600, 128, 1)), descs[1]], ())  # same address, other strides
    assert encoded[-1] == (4096, (8, 100, 128), (25600, 128, 1)) and len(encoded) == 4


def test_raw_launch_cache_is_bounded():
    raw, _, encoded = _raw(maxsize=3)
    for i in range(10):
        raw.launch(1, 0, [(4096 * (i + 1), (1, 64, 128), (8192, 128, 1))] * 2, ())
    assert len(raw.cache) == 3 and len(encoded) == 10


def _compiled_with(launcher, scratch=0):
    def make():
        def inner(*args):
            return launcher(*args)

        return inner

    run = types.SimpleNamespace(launch=make(), global_scratch_size=scratch, profile_scratch_size=0,
                                launch_cooperative_grid=False, launch_pdl=False)  # fmt: skip
    return types.SimpleNamespace(run=run, function=5, packed_metadata=(),
                                 metadata=types.SimpleNamespace(tensordesc_meta=[META]))  # fmt: skip


def test_raw_launch_of_finds_tritons_c_launcher_or_declines():
    def c_launcher(*args):
        return args

    raw = launch.RawLaunch.of(_compiled_with(c_launcher), launch.BoundedCache(2))
    assert raw is not None and raw.c_launch is c_launcher
    assert launch.RawLaunch.of(_compiled_with(c_launcher, scratch=128), launch.BoundedCache(2)) is None
    assert launch.RawLaunch.of(types.SimpleNamespace(), launch.BoundedCache(2)) is None


def test_forward_caches_no_plan_for_refused_inputs():
    q = torch.zeros(1, 1, 8, 64, dtype=torch.float16)
    before = len(v3._PLANS)
    for _ in range(2):
        with pytest.raises(ValueError, match="version 3 cannot run"):
            v3.attention_forward(q, q, q)
    assert len(v3._PLANS) == before


def test_raw_launch_is_usable_only_without_launch_hooks(monkeypatch):
    chain = launch.knobs.HookChain()
    monkeypatch.setattr(launch.knobs.runtime, "launch_enter_hook", chain)
    monkeypatch.setattr(launch.knobs.runtime, "launch_exit_hook", None)
    assert launch.RawLaunch.usable()  # Triton 3.6's default: empty chains
    chain.add(lambda metadata: None)  # a profiler's hook: Triton's own launch builds its metadata
    assert not launch.RawLaunch.usable()


def _long(d, causal) -> dict:
    """The long-sequence choice on this Triton: MEASURED's, or NO_SPILL_BY_TRITON's where it has one."""
    return configs.NO_SPILL_BY_TRITON.get(configs.triton_minor(), {}).get((d, causal)) or v3.MEASURED[(d, causal)]


def test_short_sequences_take_their_measured_tiles():
    for (d, causal), fields in v3.MEASURED_SHORT.items():
        limit = v3.short_n(d, causal)
        assert v3.v3_config(d, causal, seq=limit) == v3.V3Config(**fields)
        assert v3.v3_config(d, causal, seq=limit + 1) == v3.V3Config(**_long(d, causal))
        assert v3.v3_config(d, causal) == v3.V3Config(**_long(d, causal))


def test_a_triton_whose_code_spills_takes_its_no_spill_choice(monkeypatch):
    """On a Triton listed in NO_SPILL_BY_TRITON the long sequences of that (head dim, causal) take its choice; the
    short ones and every other key keep the measured tiles."""
    for minor, choices in configs.NO_SPILL_BY_TRITON.items():
        monkeypatch.setattr(gluon_compat, "triton_minor", lambda minor=minor: minor)
        for (d, causal), fields in choices.items():
            assert v3.v3_config(d, causal) == v3.v3_config(d, causal, seq=1 << 20) == v3.V3Config(**fields)
            short = v3.MEASURED_SHORT.get((d, causal))
            if short:
                assert v3.v3_config(d, causal, seq=1) == v3.V3Config(**short)
        for key, fields in v3.MEASURED.items():
            if key not in choices:
                assert v3.v3_config(*key) == v3.V3Config(**fields)


def test_causal_problems_take_persistent_pairs():
    """Run l's choice: causal problems take persistent (longest, shortest) pairs at every N; step 1 at d=64 up to
    N = 2k, step 3 with Q from registers at d=64 beyond and at d=128 from N = 8k (step 3, Q from shared memory, up to
    N = 4k); non-causal launches never pair."""
    for d, seq, step, q_regs in ((64, 1024, 1, False), (64, 4096, 3, True), (64, 16384, 3, True),
                                 (128, 1024, 3, False), (128, 4096, 3, False), (128, 8192, 3, True),
                                 (128, 16384, 3, True)):  # fmt: skip
        cfg = v3.v3_config(d, True, seq=seq)
        assert (cfg.pairs, cfg.persistent, cfg.step, cfg.consumers, cfg.q_regs) == (True, True, step, 2, q_regs)
        assert v3.paired(True, cfg, tiles=-(-seq // 128) * (16384 // seq) * (1024 // d), sms=132)
    for d in (64, 128):
        assert not v3.v3_config(d, False, seq=1024).pairs


def test_pairs_only_for_persistent_causal_launches_with_more_tiles_than_sms():
    cfg = v3.V3Config(persistent=True, q_buffers=2, pairs=True)
    assert v3.paired(True, cfg, tiles=2048, sms=132)
    assert not v3.paired(True, cfg, tiles=132, sms=132)  # pairs would leave half the programs' SMs idle
    assert not v3.paired(False, cfg, tiles=2048, sms=132)  # non-causal tiles are all alike
    assert not v3.paired(True, v3.V3Config(persistent=True), tiles=2048, sms=132)
    assert v3.constexprs(64, True, cfg)["PAIRS"] and not v3.constexprs(64, True, cfg, pairs=False)["PAIRS"]
    assert not v3.constexprs(64, False, cfg)["PAIRS"]
