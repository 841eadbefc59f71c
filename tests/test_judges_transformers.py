"""The local transformers backend with a tiny model built from a config (nothing downloaded).

Slow tier: importing torch and transformers and building the model take ~15-20 s on 2 CPU cores.
"""

import pytest

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from honestci.judges.backends.base import JudgeRequest  # noqa: E402
from honestci.judges.backends.transformers_local import TransformersBackend  # noqa: E402
from honestci.judges.parse import parse_verdict  # noqa: E402
from honestci.judges.prompts import get_template  # noqa: E402
from honestci.judges.run import load_texts, run_judging  # noqa: E402
from honestci.judges.stub_server import write_stub_study  # noqa: E402
from honestci.judges.tables import read_rows  # noqa: E402


@pytest.fixture(scope="module")
def tiny_judge(tmp_path_factory):
    """Qwen3 config (hidden 64, 2 layers) + a byte-level BPE tokenizer trained here on varied text."""
    from honestci.training.tiny import build_tiny_causal_lm

    corpus = [
        get_template().system,
        get_template().user,
        "[[A]] [[B]] [[C]] Final verdict: Response A is better.",
        "My friend cancelled on me again; maybe they are overwhelmed and it says little about me.",
    ]
    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny-judge"), corpus, vocab_size=400)


def test_transformers_backend_judges_both_orders_and_records_raw_replies(tiny_judge, tmp_path):
    study = write_stub_study(tmp_path, n_contests=2)
    texts = load_texts(study["vignettes"], study["responses"])
    backend = TransformersBackend(tiny_judge, judge_name="tiny-qwen3")
    sampling = {"temperature": 0.0, "max_tokens": 6}
    summary = run_judging(
        study["contests"], texts, backend, get_template(), tmp_path / "out.jsonl", sampling=sampling, progress=False
    )
    rows = [r.values for r in read_rows(tmp_path / "out.jsonl")]
    assert len(rows) == 4 and summary.n_asked == 4 and {r["judge"] for r in rows} == {"tiny-qwen3"}
    for row in rows:
        # The stored reply is exactly what greedy decoding gives, and its verdict is what the parser says
        # (a random model: mostly invalid, which is counted, never guessed).
        scenario = texts.vignettes[row["vignette_id"]]
        messages = get_template().render(
            scenario, texts.responses[row["response_first"]], texts.responses[row["response_second"]]
        )
        request = JudgeRequest(
            row["vignette_id"], row["response_first"], row["response_second"], tuple(messages), sampling
        )
        assert backend.generate(request) == row["raw"]
        assert row["verdict"] == parse_verdict(row["raw"]).verdict
    assert summary.n_invalid == sum(r["verdict"] == "invalid" for r in rows)


def test_transformers_sampling_is_seeded_per_pair_and_leaves_global_rng_alone(tiny_judge):
    backend = TransformersBackend(tiny_judge, seed=3)
    request = JudgeRequest(
        "v", "1", "2", tuple(get_template().render("s", "a", "b")), {"temperature": 1.0, "max_tokens": 8}
    )
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first = backend.generate(request)
    assert torch.equal(torch.get_rng_state(), before)
    assert backend.generate(request) == first
