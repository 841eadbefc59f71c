"""The progress meter: line format, cadence, final line, quiet, live bars (fake clock and stream)."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest

from honestci.audit.progress import Progress, as_progress, format_duration


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _plain(clock: FakeClock, **kwargs) -> tuple[Progress, io.StringIO]:
    stream = io.StringIO()
    return Progress(stream=stream, tty=False, clock=clock, **kwargs), stream


def _lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_line_format_rate_eta_and_final_line():
    clock = FakeClock()
    progress, stream = _plain(clock)
    with progress.meter(400, "judging", "judgments") as meter:
        clock.now += 40.0
        meter.advance(100, invalid=2)  # 25%: crosses the 10% and 20% marks -> one line
        clock.now += 85.0
        meter.advance(300)
    # 100 in 40 s: 2.5/s, 300 left -> 120 s = 02:00; final: 400 in 125 s = 3.2/s
    assert _lines(stream) == [
        "judging 0/400 judgments (0%)",
        "judging 100/400 judgments (25%) 2.50 judgments/s ETA 02:00 invalid=2",
        "judging done: 400/400 judgments in 02:05 (3.20 judgments/s) invalid=2",
    ]


def test_cadence_every_tenth_or_every_ten_seconds():
    clock = FakeClock()
    progress, stream = _plain(clock)
    meter = progress.meter(1000, "cells", "cells")
    for _ in range(1000):
        clock.now += 0.001  # 1 s in all: only the 10% marks write a line
        meter.advance()
    assert len(_lines(stream)) == 1 + 9  # start + 10%..90% (100% is left to the final line)
    meter.close()
    assert _lines(stream)[-1].startswith("cells done: 1000/1000 cells in 00:01")

    clock2 = FakeClock()
    slow, slow_stream = _plain(clock2)
    meter = slow.meter(10_000, "scan", "docs")
    for _ in range(30):
        clock2.now += 1.0  # 30 s, 0.3% done: a line every 10 s only
        meter.advance()
    assert len(_lines(slow_stream)) == 1 + 3
    assert _lines(slow_stream)[1] == "scan 10/10000 docs (0%) 1.00 docs/s ETA 2:46:30"


def test_rate_counts_only_this_runs_work():
    """Work already done (a cache) is not speed: the rate and ETA use what this run did."""
    clock = FakeClock()
    progress, stream = _plain(clock)
    meter = progress.meter(100, "judging", "judgments", done=90)
    assert _lines(stream) == ["judging 90/100 judgments (90%)"]
    clock.now += 10.0
    meter.advance(5)  # 5 in 10 s = 0.5/s; 5 left -> 10 s
    assert _lines(stream)[-1] == "judging 95/100 judgments (95%) 0.50 judgments/s ETA 00:10"


def test_scaled_units_and_unknown_total():
    clock = FakeClock()
    progress, stream = _plain(clock)
    meter = progress.meter(50_000_000, "leakage scan", "MB", scale=1e6)
    clock.now += 2.0
    meter.update(10_000_000)
    assert _lines(stream)[-1] == "leakage scan 10.0/50.0 MB (20%) 5.00 MB/s ETA 00:08"
    unknown = progress.meter(None, "sampling", "draws")
    clock.now += 12.0
    unknown.advance(24)
    assert _lines(stream)[-1] == "sampling 24 draws 2.00 draws/s elapsed 00:12"


def test_quiet_writes_nothing_and_close_is_idempotent():
    stream = io.StringIO()
    quiet = Progress(enabled=False, stream=stream, tty=False)
    with quiet.meter(10, "judging") as meter:
        meter.advance(10)
    quiet("a message")
    assert stream.getvalue() == "" and not meter.active
    clock = FakeClock()
    progress, loud = _plain(clock)
    meter = progress.meter(2, "x")
    meter.close()
    meter.close()
    meter.advance()
    assert len(_lines(loud)) == 2


def test_messages_and_callables():
    clock = FakeClock()
    progress, stream = _plain(clock)
    progress("loading claim and data")
    assert _lines(stream) == ["… loading claim and data"]
    seen: list[str] = []
    wrapped = as_progress(seen.append)
    wrapped("step")
    wrapped.meter(3, "cells", "cells").close()
    assert seen == ["step", "cells 0/3 cells (0%)", "cells done: 0/3 cells in 00:00"]
    assert as_progress(True).enabled and not as_progress(False).enabled and not as_progress(None).enabled
    with pytest.raises(TypeError):
        as_progress(3)  # type: ignore[arg-type]


def test_live_bar_on_a_terminal():
    """On a terminal the meter is a rich bar (no plain lines); messages print above it."""
    clock = FakeClock()
    stream = io.StringIO()
    progress = Progress(stream=stream, tty=True, clock=clock)
    assert progress.live
    with progress.meter(4, "judging", "judgments") as meter:
        progress("a message")
        clock.now += 2.0
        meter.advance(4)
    text = stream.getvalue()
    assert "judging" in text and "4/4 judgments" in text and "a message" in text
    assert "judging done:" not in text and "\x1b[" in text  # a terminal drawing, not the plain final line


def test_format_duration():
    assert [format_duration(s) for s in (0, 59.4, 61, 3599, 3600, 7322)] == [
        "00:00",
        "00:59",
        "01:01",
        "59:59",
        "1:00:00",
        "2:02:02",
    ]


# --------------------------------------------------------------------------------------------
# Wired places: each writes plain lines when standard error is not a terminal (CliRunner's is not).


def test_judging_writes_lines_with_rate_in_a_log(tmp_path):
    from click.testing import CliRunner

    from honestci.audit.cli.judges import judge_command
    from honestci.judges.stub_server import StubConfig, StubJudgeServer, write_stub_study

    study = write_stub_study(tmp_path, n_contests=4)
    inputs = [str(study["contests"]), "--vignettes", str(study["vignettes"]), "--responses", str(study["responses"])]
    with StubJudgeServer(StubConfig()) as server:
        backend = ["--base-url", server.base_url, "--model", "stub-judge"]
        result = CliRunner().invoke(judge_command, [*inputs, *backend, "--out", str(tmp_path / "j.csv")])
        quiet = CliRunner().invoke(
            judge_command, [*inputs, *backend, "--out", str(tmp_path / "k.csv"), "--no-progress"]
        )
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("judging (stub-judge)")]
    assert lines[0] == "judging (stub-judge) 0/8 judgments (0%)"
    # every further eighth crosses a 10% mark: a line with rate and ETA each time, then the final line
    assert all(" judgments/s ETA " in line for line in lines[1:-1]) and len(lines) == 1 + 7 + 1
    assert lines[-1].startswith("judging (stub-judge) done: 8/8 judgments in ")
    assert quiet.exit_code == 0 and "judging (stub-judge)" not in quiet.stderr


def _tiny_contest_scores():
    rng = np.random.default_rng(0)
    vignette = np.repeat(np.arange(6), 5)
    return vignette, rng.choice([0.0, 0.5, 1.0], size=vignette.size)


def test_bayesian_fit_writes_a_start_and_final_line_per_fit_with_nutpie():
    """A fit's lines are headed by its label: a start line, then (after any lines read while
    sampling) a final line with every chain's draws, the elapsed time and divergences."""
    from honestci.audit.stats.bayesian.hierarchical import fit_contest_scores_hierarchical

    vignette, score = _tiny_contest_scores()
    stream = io.StringIO()
    progress = Progress(stream=stream, tty=False)
    fit_contest_scores_hierarchical(
        vignette, score, sampler="nutpie", chains=2, draws=50, tune=50, seed=1, progress=progress
    )
    lines = _lines(stream)
    assert lines[0] == "bayes fit (HalfNormal(1), non_centred) with nutpie 0/200 draws (0%)"
    assert lines[-1].startswith("bayes fit (HalfNormal(1), non_centred) with nutpie done: 200/200 draws in ")
    assert " chains=100/100 divergences=" in lines[-1]


def test_bayesian_fit_counts_every_chains_draws_with_nutpie(monkeypatch):
    """In a log nutpie samples in the background and its trace is read while it runs: lines carry
    each chain's draws (summing to the count shown), rate and ETA, then the final line; the draws
    are those of the blocking call (a disabled Progress) with the same seed."""
    from honestci.audit.stats.bayesian import cells as bayes_cells
    from honestci.audit.stats.bayesian import model as bayes_model
    from honestci.audit.stats.bayesian import sampling as bayes_sampling

    # read the trace as often as it can be read (each read takes ~0.1 s) and write every read
    monkeypatch.setattr(bayes_sampling, "_NUTPIE_POLL_S", 0.01)
    vignette, score = _tiny_contest_scores()
    cells = bayes_cells.aggregate_contest_cells(vignette, score)
    prior = bayes_model.SIGMA_PRIORS["halfnormal1"]
    stream = io.StringIO()
    settings = {"chains": 2, "draws": 3000, "tune": 3000, "seed": 1, "label": "fit"}
    polled = bayes_sampling._sample_nutpie(
        bayes_model._density_model(cells, prior, False),
        progress=Progress(stream=stream, tty=False, every_s=0.0),
        **settings,
    )
    blocking = bayes_sampling._sample_nutpie(
        bayes_model._density_model(cells, prior, False), progress=Progress.off(), **settings
    )
    lines = _lines(stream)
    assert lines[0] == "fit with nutpie 0/12000 draws (0%)"
    # a read before any draw is made has no rate yet: rate and ETA from the first draw on
    pattern = (
        r"fit with nutpie (\d+)/12000 draws \(\d+%\)( [\d.]+ draws/s ETA [\d:]+)? chains=(\d+)/(\d+) divergences=\d+"
    )
    middle = [re.fullmatch(pattern, line) for line in lines[1:-1]]
    assert all(middle), lines
    reads = [(int(m[1]), m[2] is not None, int(m[3]), int(m[4])) for m in middle if m]
    assert all(total == first + second and rated == (total > 0) for total, rated, first, second in reads)
    assert sum(total > 0 for total, *_ in reads) >= 2, lines
    assert [total for total, *_ in reads] == sorted(total for total, *_ in reads)
    assert re.fullmatch(
        r"fit with nutpie done: 12000/12000 draws in \d\d:\d\d \([\d.]+ draws/s\) "
        r"chains=6000/6000 divergences=\d+",
        lines[-1],
    ), lines[-1]
    assert sorted(polled.groups()) == sorted(blocking.groups())
    for name in blocking.posterior.data_vars:
        np.testing.assert_array_equal(polled.posterior[name].values, blocking.posterior[name].values)
    np.testing.assert_array_equal(polled.sample_stats["diverging"].values, blocking.sample_stats["diverging"].values)


@pytest.mark.slow
def test_bayesian_fit_counts_every_chains_draws_with_pymc():
    """PyMC calls back after every draw: lines carry each chain's count, rate and ETA."""
    from honestci.audit.stats.bayesian.hierarchical import fit_contest_scores_hierarchical

    vignette, score = _tiny_contest_scores()
    stream = io.StringIO()
    fit_contest_scores_hierarchical(
        vignette,
        score,
        sampler="pymc",
        chains=2,
        draws=100,
        tune=100,
        seed=1,
        progress=Progress(stream=stream, tty=False),
    )
    lines = _lines(stream)
    middle = [line for line in lines[1:-1] if "%)" in line]
    assert len(middle) >= 8 and all(" draws/s ETA " in line and " chains=" in line for line in middle)
    assert lines[-1].startswith("bayes fit (HalfNormal(1), non_centred) with PyMC done: 400/400 draws in ")
    assert " chains=200/200 " in lines[-1]


def test_coverage_study_meters_its_cells():
    from honestci.audit.stats.design.coverage_study import Grid, run_coverage_study

    seen: list[str] = []
    grid = Grid((6, 8), ("balanced",), (1.0,), (0.8,), (0.0, 1.0))  # 4 cells
    run_coverage_study(reps=10, methods=("wilson",), grid=grid, seed=5, progress=seen.append)
    label = "coverage study (10 reps/cell)"
    assert seen[0] == f"{label} 0/4 cells (0%)"
    assert [line.split(" cells/s ETA ")[0].rsplit(" ", 1)[0] for line in seen[1:-1]] == [
        f"{label} 1/4 cells (25%)",
        f"{label} 2/4 cells (50%)",
        f"{label} 3/4 cells (75%)",
    ]
    assert seen[-1].startswith(f"{label} done: 4/4 cells in ")


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".parquet", ".txt"])
def test_leakage_reader_reports_every_byte_of_the_file_on_disk(tmp_path, suffix):
    import gzip
    import json

    from honestci.audit.checks.corpus_reader import iter_corpus

    texts = [f"document {i} " + "word " * (i % 40) for i in range(3000)]
    path = tmp_path / f"corpus{suffix}"
    if suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({"doc_id": [f"d{i}" for i in range(len(texts))], "text": texts})
        pq.write_table(table, path, row_group_size=500)
    else:
        rows = (json.dumps({"doc_id": f"d{i}", "text": t}) if "jsonl" in suffix else t for i, t in enumerate(texts))
        data = "".join(row + "\n" for row in rows).encode()
        path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    reported: list[int] = []
    batches = list(iter_corpus(path, chunk_bytes=20_000, on_bytes=reported.append))
    assert sum(len(ids) for ids, _ in batches) == len(texts)
    assert len(reported) == len(batches) > 1 and sum(reported) == path.stat().st_size


def test_leakage_scan_meters_megabytes_with_rate_and_eta(tmp_path):
    import json

    from honestci.audit.checks.leakage import scan_corpus
    from honestci.audit.checks.ngram_index import build_index

    rng = np.random.default_rng(3)
    vocab = [f"w{i}" for i in range(500)]
    path = tmp_path / "corpus.jsonl"
    with path.open("w") as handle:
        for i in range(4000):  # about 2.6 MB
            handle.write(json.dumps({"doc_id": f"d{i}", "text": " ".join(rng.choice(vocab, 100))}) + "\n")
    size_mb = path.stat().st_size / 1e6
    seen: list[str] = []
    index = build_index({"a": "an answer that appears nowhere in this corpus at all today"}, 8)
    scan_corpus(index, path, chunk_bytes=100_000, progress=seen.append)
    assert seen[0] == f"leakage scan 0.0/{size_mb:.1f} MB (0%)"
    assert len(seen) >= 2 + 9 and all(" MB/s ETA " in line and "documents=" in line for line in seen[1:-1])
    assert seen[-1].startswith(f"leakage scan done: {size_mb:.1f}/{size_mb:.1f} MB in ")
    assert seen[-1].endswith(" documents=4000")


def test_dask_leakage_scan_meters_finished_tasks(tmp_path):
    distributed = pytest.importorskip("distributed")
    from honestci.audit.checks.leakage import byte_ranges, scan_corpus_dask
    from honestci.audit.checks.ngram_index import build_index

    path = tmp_path / "corpus.txt"
    path.write_text("".join(f"line {i} of a plain text corpus\n" for i in range(3000)))
    index = build_index({"a": "an answer that appears nowhere in this corpus at all today"}, 8)
    seen: list[str] = []
    with (
        distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        scan = scan_corpus_dask(index, path, client, block_bytes=10_000, progress=seen.append)
    tasks = len(byte_ranges(path, 10_000))
    size_mb = path.stat().st_size / 1e6
    assert scan.n_docs == 3000 and tasks > 5
    assert seen[0] == f"leakage scan ({tasks} tasks) 0.0/{size_mb:.1f} MB (0%)"
    assert seen[-1].startswith(f"leakage scan ({tasks} tasks) done: {size_mb:.1f}/{size_mb:.1f} MB in ")


def test_training_callback_writes_step_k_of_n_with_reward_kl_loss_and_eta_at_every_log():
    pytest.importorskip("transformers")
    from types import SimpleNamespace

    from honestci.training.progress import TrainingProgress

    clock = FakeClock()
    progress, stream = _plain(clock)
    callback = TrainingProgress(progress, "GRPO")
    state = SimpleNamespace(is_world_process_zero=True, max_steps=100, global_step=0)
    callback.on_train_begin(None, state, None)
    for step in (1, 2):  # logging_steps=1: a line at every log, whatever the 10% cadence says
        clock.now += 6.0
        state.global_step = step
        callback.on_log(None, state, None, logs={"loss": 0.25, "reward": 0.5, "reward_std": 0.125, "kl": 0.002})
    state.global_step = 100
    callback.on_log(None, state, None, logs={"train_loss": 0.3, "train_runtime": 12.0})  # the summary row
    callback.on_train_end(None, state, None)
    assert _lines(stream) == [
        "GRPO 0/100 steps (0%)",
        "GRPO 1/100 steps (1%) 0.17 steps/s ETA 09:54 loss=0.25 reward=0.5 reward_sd=0.125 kl=0.002",
        "GRPO 2/100 steps (2%) 0.17 steps/s ETA 09:48 loss=0.25 reward=0.5 reward_sd=0.125 kl=0.002",
        "GRPO done: 100/100 steps in 00:12 (8.33 steps/s) loss=0.25 reward=0.5 reward_sd=0.125 kl=0.002",
    ]
