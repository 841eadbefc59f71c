"""Leakage scan of corpora by URL (a local S3 server), Parquet by row group, Dask attached by address."""

from __future__ import annotations

import gzip
import json
import logging
import socket
import sys
from pathlib import Path

import numpy as np
import pytest

from honestci.audit.checks.corpus_files import corpus_size, expand_corpus, open_corpus, parse_storage_options
from honestci.audit.checks.corpus_reader import iter_corpus, parquet_row_groups
from honestci.audit.checks.leakage import plan_tasks, scan_corpus, scan_corpus_dask
from honestci.audit.checks.ngram_index import build_index
from honestci.audit.errors import InputError, MissingExtraError

#: Two answers planted in the corpus, one too short to have an 8-gram.
EVAL = {
    "a1": "Perhaps your sister forgot the date because her week at the new job was so demanding.",
    "a2": "A missed call can mean the phone was on silent rather than that you were ignored on purpose.",
    "short": "two words",
}
BUCKET = "honestci-corpus"
CREDENTIALS = {"key": "testing", "secret": "testing", "client_kwargs": {"region_name": "us-east-1"}}


def _docs(n: int = 300, seed: int = 5) -> list[tuple[str, str]]:
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(80)]
    docs = [(f"d{i}", " ".join(rng.choice(vocab, 60))) for i in range(n)]
    docs[17] = ("d17", docs[17][1] + " " + EVAL["a1"])
    docs[n - 3] = (f"d{n - 3}", "Forum post. " + EVAL["a2"] + " Thanks.")
    return docs


def _write_corpora(folder: Path, docs) -> dict[str, Path]:
    """The same documents as JSONL, JSONL.gz, text and a Parquet file of many row groups."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    jsonl = "".join(json.dumps({"doc_id": d, "text": t}) + "\n" for d, t in docs).encode()
    paths = {
        "jsonl": folder / "part-0.jsonl",
        "gz": folder / "part-1.jsonl.gz",
        "txt": folder / "part-2.txt",
        "parquet": folder / "part-3.parquet",
    }
    paths["jsonl"].write_bytes(jsonl)
    paths["gz"].write_bytes(gzip.compress(jsonl))
    paths["txt"].write_bytes("".join(t + "\n" for _, t in docs).encode())
    table = pa.table({"doc_id": [d for d, _ in docs], "text": [t for _, t in docs]})
    pq.write_table(table, paths["parquet"], row_group_size=37)
    return paths


def _same_scan(a, b) -> None:
    assert a.n_docs == b.n_docs and a.n_bytes == b.n_bytes
    assert a.items.equals(b.items), (a.items, b.items)
    assert a.documents.equals(b.documents), (a.documents, b.documents)


# ---------------------------------------------------------------------------- a local S3 server


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def s3_store(tmp_path_factory):
    """moto's S3 server on 127.0.0.1 (a free port), a bucket with the corpora; stopped at the end."""
    pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    import boto3

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        client.create_bucket(Bucket=BUCKET)
        local = _write_corpora(tmp_path_factory.mktemp("s3src"), _docs())
        urls = {}
        for kind, path in local.items():
            client.put_object(Bucket=BUCKET, Key=f"corpus/{path.name}", Body=path.read_bytes())
            urls[kind] = f"s3://{BUCKET}/corpus/{path.name}"
        yield {"endpoint": endpoint, "options": {**CREDENTIALS, "endpoint_url": endpoint}, "local": local, "urls": urls}
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _no_cloud_metadata(monkeypatch):
    # botocore must never look for credentials outside the test (instance metadata, ~/.aws)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")


def test_s3_scan_equals_the_local_file_scan(s3_store):
    index = build_index(EVAL, 8)
    local, urls, options = s3_store["local"], s3_store["urls"], s3_store["options"]
    for kind in ("jsonl", "gz", "txt", "parquet"):
        remote = scan_corpus(index, urls[kind], storage_options=options, chunk_bytes=2048)
        here = scan_corpus(index, local[kind], chunk_bytes=2048)
        _same_scan(remote, here)
        assert remote.leaked_items == ("a1", "a2"), kind
        assert corpus_size(urls[kind], options) == local[kind].stat().st_size
    # a glob of URLs, sorted, equals the local files in the same order
    matched = expand_corpus(f"s3://{BUCKET}/corpus/part-*", options)
    assert matched == [urls[k] for k in ("jsonl", "gz", "txt", "parquet")]
    _same_scan(
        scan_corpus(index, f"s3://{BUCKET}/corpus/part-*", storage_options=options),
        scan_corpus(index, [local[k] for k in ("jsonl", "gz", "txt", "parquet")]),
    )


def test_s3_errors_name_the_url(s3_store):
    options = s3_store["options"]
    with pytest.raises(InputError, match="missing.jsonl: corpus file not found"):
        scan_corpus(build_index(EVAL, 8), f"s3://{BUCKET}/corpus/missing.jsonl", storage_options=options)
    with pytest.raises(InputError, match="no corpus file matches"):
        expand_corpus(f"s3://{BUCKET}/nothing/*.jsonl", options)


# ---------------------------------------------------------------------------- Dask, attached by address


@pytest.fixture(scope="module")
def process_cluster():
    """Two worker processes (one thread each), attached to by address as a remote cluster would be."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield cluster


@pytest.mark.e2e  # two worker processes (about 15 s with their start)
def test_dask_workers_read_s3_themselves_and_equal_the_local_scan(s3_store, process_cluster):
    import distributed

    index = build_index(EVAL, 8)
    urls, options = s3_store["urls"], s3_store["options"]
    files = [urls[k] for k in ("jsonl", "gz", "txt", "parquet")]
    local_files = [s3_store["local"][k] for k in ("jsonl", "gz", "txt", "parquet")]
    serial = scan_corpus(index, local_files)
    tasks = plan_tasks(files, 4096, options)
    assert sum(t.row_groups is not None for t in tasks) > 1 and sum(t.byte_range is not None for t in tasks) > 4
    with (
        distributed.Client(process_cluster.scheduler_address) as client,
        distributed.get_task_stream(client) as stream,
    ):
        parallel = scan_corpus_dask(index, files, client, block_bytes=4096, storage_options=options)
    with distributed.Client(process_cluster.scheduler_address) as client:
        on_local_files = scan_corpus_dask(index, local_files, client, block_bytes=4096)
    # ids from a byte range are <file>@<offset> (the text file has none); everything else as serial
    _same_scan(parallel, on_local_files)
    assert parallel.n_docs == serial.n_docs and parallel.leaked_items == serial.leaked_items == ("a1", "a2")
    numbers = ["item_id", "n_ngrams", "matched_ngrams", "overlap", "longest_span", "n_docs", "leaked"]
    assert parallel.items[numbers].equals(serial.items[numbers])
    scans = [t for t in stream.data if "_scan_range" in t["key"]]
    assert len(scans) == len(tasks) and len({t["worker"] for t in scans}) == 2  # both workers scanned


@pytest.mark.e2e  # two worker processes (about 15 s with their start)
def test_cli_scheduler_address_scans_s3_urls(s3_store, process_cluster, tmp_path):
    from click.testing import CliRunner

    from honestci.audit.cli.selection import leakage

    eval_file = tmp_path / "eval.jsonl"
    eval_file.write_text("".join(json.dumps({"response_id": k, "text": v}) + "\n" for k, v in EVAL.items()))
    args = ["--eval", str(eval_file), "--scheduler", process_cluster.scheduler_address, "--out", str(tmp_path)]
    args += ["--corpus", f"s3://{BUCKET}/corpus/part-*"]
    args += ["--storage-option", f"endpoint_url={s3_store['endpoint']}", "--storage-option", "key=testing"]
    args += ["--storage-option", "secret=testing", "--storage-option", "client_kwargs.region_name=us-east-1"]
    result = CliRunner().invoke(leakage, args)
    assert result.exit_code == 1, result.output  # the planted answers leaked
    import pandas as pd

    local = scan_corpus(build_index(EVAL, 8), [s3_store["local"][k] for k in ("jsonl", "gz", "txt", "parquet")])
    written = pd.read_csv(tmp_path / "leakage_items.csv")
    assert written["item_id"].tolist() == local.items["item_id"].tolist()
    assert written["matched_ngrams"].tolist() == local.items["matched_ngrams"].tolist()
    assert written["leaked"].tolist() == local.items["leaked"].tolist() == [True, True, False]
    both = CliRunner().invoke(leakage, args + ["--workers", "2"])
    assert both.exit_code == 2 and "--workers and --scheduler" in both.output


# ---------------------------------------------------------------------------- Parquet by row group


@pytest.mark.parametrize("with_ids", [True, False])
def test_parquet_row_groups_equal_the_whole_file_read(tmp_path, with_ids):
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = _docs(500)
    columns = {"text": [t for _, t in docs]}
    if with_ids:
        columns = {"doc_id": [d for d, _ in docs], **columns}
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table(columns), path, row_group_size=61)
    id_field = "doc_id" if with_ids else None
    whole = pq.read_table(path)
    expected_ids = [d for d, _ in docs] if with_ids else [f"c.parquet:{i + 1}" for i in range(len(docs))]
    ids, texts = map(lambda parts: sum(parts, []), zip(*iter_corpus(path, id_field=id_field, chunk_bytes=50_000)))
    assert texts == whole.column("text").to_pylist() and ids == expected_ids
    meta = pq.ParquetFile(path).metadata
    compressed = sum(
        meta.row_group(g).column(c).total_compressed_size
        for g in range(meta.num_row_groups)
        for c in range(len(columns))
    )
    target = compressed // 3  # about three runs of row groups
    runs = parquet_row_groups(str(path), target)
    assert len(runs) > 2 and sum(runs, []) == list(range(pq.ParquetFile(path).metadata.num_row_groups))
    from honestci.audit.checks.corpus_reader import iter_parquet

    pieces = [batch for run in runs for batch in iter_parquet(str(path), "text", id_field, 50_000, row_groups=run)]
    assert sum((p[0] for p in pieces), []) == expected_ids and sum((p[1] for p in pieces), []) == texts
    index = build_index(EVAL, 8)
    serial = scan_corpus(index, path, id_field=id_field)
    assert serial.leaked_items == ("a1", "a2")
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        parallel = scan_corpus_dask(index, path, client, id_field=id_field, block_bytes=target)
    _same_scan(parallel, serial)


def test_parquet_is_read_one_row_group_at_a_time(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"text": [f"doc {i}" for i in range(100)]}), path, row_group_size=10)
    asked = []
    original = pq.ParquetFile.iter_batches

    def spy(self, *args, **kwargs):
        asked.append(kwargs.get("row_groups"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    assert sum(len(t) for _, t in iter_corpus(path, id_field=None)) == 100
    assert asked == [[g] for g in range(10)]


# ---------------------------------------------------------------------------- errors and options


def test_a_protocol_whose_package_is_missing_says_what_to_install(monkeypatch, tmp_path):
    import fsspec  # noqa: F401 (loads fsspec.registry)

    registry = sys.modules["fsspec.registry"]._registry  # `fsspec.registry` is the read-only view
    monkeypatch.delitem(registry, "s3", raising=False)
    monkeypatch.setitem(sys.modules, "s3fs", None)  # `import s3fs` fails as when it is not installed
    with pytest.raises(InputError, match=r"(?s)s3:// protocol needs s3fs.*pip install s3fs"):
        scan_corpus(build_index(EVAL, 8), "s3://bucket/corpus.jsonl")
    with pytest.raises(InputError, match="Protocol not known"):
        open_corpus("nosuchproto://bucket/corpus.jsonl")


def test_urls_without_fsspec_need_the_distributed_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "fsspec", None)
    monkeypatch.setitem(sys.modules, "fsspec.core", None)
    with pytest.raises(MissingExtraError, match=r"honestci\[distributed\]"):
        corpus_size("s3://bucket/corpus.jsonl")
    local = tmp_path / "c.jsonl"
    local.write_text('{"doc_id": "x", "text": "' + EVAL["a2"] + '"}\n')
    # local paths and file:// URLs never need fsspec
    assert scan_corpus(build_index(EVAL, 8), f"file://{local}").leaked_items == ("a2",)


def test_storage_options_parse_json_values_and_dotted_keys():
    assert parse_storage_options(
        ["anon=true", "endpoint_url=http://127.0.0.1:9000", "client_kwargs.region_name=eu-west-1", "max=4"]
    ) == {
        "anon": True,
        "endpoint_url": "http://127.0.0.1:9000",
        "client_kwargs": {"region_name": "eu-west-1"},
        "max": 4,
    }
    with pytest.raises(InputError, match="KEY=VALUE"):
        parse_storage_options(["endpoint_url"])


def test_local_globs_expand_sorted_and_an_empty_glob_is_an_input_error(tmp_path):
    paths = _write_corpora(tmp_path, _docs(50))
    assert expand_corpus(str(tmp_path / "part-*.jsonl*")) == [str(paths["jsonl"]), str(paths["gz"])]
    with pytest.raises(InputError, match="no corpus file matches"):
        expand_corpus(str(tmp_path / "nothing-*.jsonl"))


_FAULTS_SCRIPT = """
import json, resource, sys
from honestci.audit.checks.corpus_reader import iter_corpus
from honestci.audit.checks.leakage import CorpusTask, _Matches, _scan_range, scan_batch
from honestci.audit.checks.ngram_index import build_index
path, index = sys.argv[1], build_index({"a": "an answer that appears nowhere in this corpus at all today"}, 8)
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
_scan_range(index, CorpusTask(path, 0, (0, 1 << 20)), "text", "doc_id", 1 << 20, None, 0.35, None)  # warm-up
before = faults()
for ids, texts in iter_corpus(path):  # the loop of a task, without the malloc settings
    _Matches().merge(scan_batch(index, ids, texts))
plain = faults() - before
before = faults()
_scan_range(index, CorpusTask(path, 0, (0, 1 << 40)), "text", "doc_id", 4 << 20, None, 0.35, None)
print(json.dumps({"plain": plain, "task": faults() - before}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc settings")
def test_a_task_reuses_its_chunk_buffers_under_dasks_malloc_trim_threshold(tmp_path):
    """Dask's MALLOC_TRIM_THRESHOLD_=65536 made every chunk buffer a fresh mmap (docs/leakage.md)."""
    import os
    import subprocess

    rng = np.random.default_rng(3)
    words = np.array([f"w{i}" for i in range(5000)])[rng.integers(0, 5000, (5000, 500))]
    path = tmp_path / "c.jsonl"  # 15 MB: four 4 MB chunks
    path.write_text("".join(f'{{"doc_id": "d{i}", "text": "{" ".join(row)}"}}\n' for i, row in enumerate(words)))
    env = dict(os.environ, MALLOC_TRIM_THRESHOLD_="65536")
    out = subprocess.run(
        [sys.executable, "-c", _FAULTS_SCRIPT, str(path)], env=env, capture_output=True, text=True, check=True
    )
    faults = json.loads(out.stdout.strip().splitlines()[-1])
    assert faults["task"] < 0.6 * faults["plain"], faults  # measured 0.36x; 0.88x with the fix disabled
