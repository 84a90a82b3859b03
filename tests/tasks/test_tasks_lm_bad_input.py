"""Bad input to lesson 6's language modelling (gpulab.tasks.corpus, .lm, .lm_bench, .lm_results): a clear error
naming the argument, before anything runs."""

import numpy as np
import pytest

from gpulab.tasks import corpus, lm, lm_bench, lm_results


@pytest.fixture(scope="module")
def model():
    m, _ = lm.build("LSTM 1 head", "tiny", device="cpu")
    return m


def _fake_deb(tmp_path):
    p = tmp_path / "python3.11-doc_fake_all.deb"
    p.write_bytes(b"not an ar archive")
    return p


BAD = [
    ("Corpus data", lambda m, c, t: corpus.Corpus([1, 2], 1, "x", "n"), TypeError, "data must be a 1-D uint8"),
    (
        "Corpus train_bytes",
        lambda m, c, t: corpus.Corpus(np.zeros(4, np.uint8), 9, "x", "n"),
        ValueError,
        "train_bytes",
    ),  # fmt: skip
    ("Corpus split", lambda m, c, t: c.split("test"), ValueError, "split"),
    ("Corpus batch generator", lambda m, c, t: c.batch(2, 4, 0), TypeError, "generator must be a torch.Generator"),
    ("Corpus windows count", lambda m, c, t: c.windows(0, 4), ValueError, "count"),
    ("is_validation path", lambda m, c, t: corpus.is_validation(3), TypeError, "path must be"),
    ("is_validation fraction", lambda m, c, t: corpus.is_validation("a", -1.0), ValueError, "fraction"),
    ("sha256_file path", lambda m, c, t: corpus.sha256_file(3), TypeError, "path must be a file path"),
    ("check_sha256 got", lambda m, c, t: corpus.check_sha256("x", None, "ab", "fix"), TypeError, "got must be a str"),
    (
        "check_sha256 differs",
        lambda m, c, t: corpus.check_sha256("the file", "ab", "cd", "Fix it."),
        corpus.CorpusError,
        "the file has sha256 ab, not the pinned cd",
    ),  # fmt: skip
    ("extract deb", lambda m, c, t: corpus.extract(None), TypeError, "deb must be the path of a .deb"),
    ("extract not ar", lambda m, c, t: corpus.extract(_fake_deb(t)), ValueError, "not an ar archive"),
    ("prepare deb", lambda m, c, t: corpus.prepare(t / "o.bin", deb=_fake_deb(t)), ValueError, corpus.DEB_SHA256),
    ("prepare out", lambda m, c, t: corpus.prepare(5), TypeError, "out must be"),
    ("load path", lambda m, c, t: corpus.load(5), TypeError, "path must be"),
    ("cpu_slice path", lambda m, c, t: corpus.cpu_slice(5), TypeError, "path must be"),
    ("sizes keys", lambda m, c, t: lm.sizes({"d_model": 8}), ValueError, "missing the keys"),
    ("sizes name", lambda m, c, t: lm.sizes("huge"), ValueError, "size='huge'"),
    ("build model", lambda m, c, t: lm.build("GRU"), ValueError, "model='GRU'"),
    ("model_parameters d_model", lambda m, c, t: lm.model_parameters("Transformer", 0, 2), ValueError, "d_model"),
    ("lstm_width multiple", lambda m, c, t: lm.lstm_width(768, 2, multiple=0), ValueError, "multiple"),
    ("bits_per_byte corpus", lambda m, c, t: lm.bits_per_byte(m, "text", 2, 8, 2), TypeError, "corpus must be"),
    ("bits_per_byte windows", lambda m, c, t: lm.bits_per_byte(m, c, 0, 8, 2), ValueError, "windows"),
    (
        "train_lm tokens",
        lambda m, c, t: lm.train_lm(
            m, c, tokens=0, batch_size=2, length=8, lr=1e-3, warmup=0, seed=0, eval_every=8, val_windows=2
        ),
        ValueError,
        "tokens",
    ),  # fmt: skip
    (
        "train_lm model",
        lambda m, c, t: lm.train_lm(
            None, c, tokens=8, batch_size=2, length=8, lr=1e-3, warmup=0, seed=0, eval_every=8, val_windows=2
        ),
        TypeError,
        "model must be",
    ),  # fmt: skip
    ("generate prompt", lambda m, c, t: lm.generate(m, "text"), TypeError, "prompt must be non-empty bytes"),
    ("generate count", lambda m, c, t: lm.generate(m, count=0), ValueError, "count"),
    ("generate temperature", lambda m, c, t: lm.generate(m, temperature=0.0), ValueError, "temperature"),
    ("runs keys", lambda m, c, t: lm_bench.runs({"size": "tiny"}), ValueError, "missing the keys"),
    ("runs name", lambda m, c, t: lm_bench.runs("huge"), ValueError, "runs='huge'"),
    ("estimate phase", lambda m, c, t: lm_bench.estimate("full", "warmup"), ValueError, "phase"),
    ("build_width model", lambda m, c, t: lm_bench.build_width("GRU", "full"), ValueError, "model='GRU'"),
    ("picks records", lambda m, c, t: lm_bench.picks("records"), TypeError, "results"),
    ("lm_search name", lambda m, c, t: lm_bench.lm_search("huge"), ValueError, "runs='huge'"),
    ("lm_final name", lambda m, c, t: lm_bench.lm_final("huge"), ValueError, "runs='huge'"),
    (
        "lm_final no pick",
        lambda m, c, t: lm_bench.lm_final("tiny", search=[], verbose=False),
        ValueError,
        "no pick for",
    ),  # fmt: skip
    ("bench_lm_search name", lambda m, c, t: lm_bench.bench_lm_search(name="huge"), ValueError, "runs='huge'"),
    ("bench_lm name", lambda m, c, t: lm_bench.bench_lm(name="huge"), ValueError, "runs='huge'"),
    ("stored_lm gpu", lambda m, c, t: lm_results.stored_lm(3), TypeError, "gpu must be"),
    ("stored_lm part", lambda m, c, t: lm_results.stored_lm("h200", part="final"), ValueError, "part"),
    ("search_table records", lambda m, c, t: lm_results.search_table("x"), TypeError, "results"),
    ("final_table records", lambda m, c, t: lm_results.final_table({"kind": "lm"}), TypeError, "results"),
    ("throughput_ratios records", lambda m, c, t: lm_results.throughput_ratios(3), TypeError, "results"),
    ("at_equal both", lambda m, c, t: lm_results.at_equal([], tokens=1, seconds=1), ValueError, "exactly one"),
    ("at_equal tokens", lambda m, c, t: lm_results.at_equal([], tokens=-1), ValueError, "tokens"),
    ("figure records", lambda m, c, t: lm_results.figure("x"), TypeError, "results"),
]


@pytest.mark.parametrize(("call", "error", "words"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_refused_naming_the_argument(call, error, words, model, tmp_path):
    with pytest.raises(error) as e:
        call(model, corpus.cpu_slice(), tmp_path)
    assert words in str(e.value)
