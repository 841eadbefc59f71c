"""``honestci winners-curse`` and ``honestci leakage`` (register with ``main.add_command``)."""

from __future__ import annotations

from pathlib import Path

import click

from honestci.audit.cli.support import exit_by_gate, fail_cleanly, level_option, policy_option, seed_option
from honestci.audit.errors import InputError


@click.command("winners-curse")
@click.argument("claim", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--opponent", default=None, help="Opponent the candidates are scored against (default: the claim's).")
@click.option("--judge", default=None, help="Judge (default: the claim's).")
@level_option
@seed_option
@policy_option
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Write winners_curse.csv here.")
@fail_cleanly
def winners_curse(claim, opponent, judge, level, seed, policy_file, out):
    """Winner's-curse analysis of the selection pool of CLAIM's study.

    Prints the naive winner estimate, the AKM median-unbiased estimate with conditional and
    hybrid intervals, the held-out replication and the gate; exits 0 only when the gate PASSes.
    """
    from honestci.audit.checks.selection import analyse_selection
    from honestci.audit.data.claims import load_claim
    from honestci.audit.data.contests import build_contests
    from honestci.audit.data.io import load_study
    from honestci.audit.data.policy_file import load_policy
    from honestci.audit.gates import gate_winners_curse

    loaded = load_claim(claim, policy=load_policy(policy_file))
    spec, thresholds = loaded.spec, loaded.thresholds
    study = load_study(loaded.data_paths)
    contests = build_contests(
        study, policy=spec.policy, opponent=spec.opponent, judge=spec.judge, single_order=loaded.policy.missing_orders
    )
    analysis = analyse_selection(
        study,
        opponent or spec.opponent,
        judge or contests.judge,
        level=level or thresholds.confidence_level,
        seed=seed,
        policy=spec.policy,
        claim_contests=contests,
        thresholds=thresholds,
    )
    click.echo("\n".join(analysis.report_section().lines))
    click.echo(analysis.to_frame().to_string(index=False))
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        analysis.to_frame().to_csv(Path(out) / "winners_curse.csv", index=False)
    exit_by_gate(gate_winners_curse(analysis, spec.bar, thresholds))


@click.command("leakage")
@click.option(
    "--eval",
    "eval_file",
    required=True,
    type=click.Path(dir_okay=False),
    help="Held-out eval items (JSONL/CSV/Parquet) with an id and a text column.",
)
@click.option("--eval-id", default="response_id", show_default=True, help="Id column of the eval file.")
@click.option("--eval-text", default="text", show_default=True, help="Text column of the eval file.")
@click.option(
    "--corpus",
    "corpora",
    required=True,
    multiple=True,
    metavar="PATH|URL",
    help="Training corpus file (JSONL[.gz], Parquet, text[.gz]): a local path, a glob, or an fsspec URL "
    "(s3://, gs://, hf://, file://); repeat for several.",
)
@click.option(
    "--storage-option",
    "storage_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="fsspec storage option for corpus URLs (e.g. endpoint_url=http://host:9000, anon=true, "
    "client_kwargs.region_name=eu-west-1; a JSON value is parsed); repeat for several.",
)
@click.option("--text-field", default="text", show_default=True, help="Text field of corpus records.")
@click.option("--id-field", default="doc_id", show_default=True, help="Id field of corpus records.")
@click.option("-n", "--ngram", default=8, show_default=True, type=int, help="Word n-gram length (13: GPT-3).")
@click.option(
    "--min-overlap",
    default=0.5,
    show_default=True,
    type=float,
    help="Fraction of an item's n-grams found that makes it leaked.",
)
@click.option(
    "--near-duplicates/--no-near-duplicates",
    default=False,
    show_default=True,
    help="Also look for paraphrases (word-shingle Jaccard against document windows).",
)
@click.option(
    "--workers",
    default=0,
    show_default=True,
    type=int,
    help="Scan on a local Dask cluster with this many worker processes (0: in this process).",
)
@click.option(
    "--scheduler",
    default=None,
    metavar="ADDRESS",
    help="Scan on an existing Dask cluster (e.g. tcp://10.0.0.5:8786); its workers read the corpus themselves.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Write leakage_items.csv and leakage_documents.csv here.",
)
@fail_cleanly
def leakage(
    eval_file,
    eval_id,
    eval_text,
    corpora,
    storage_options,
    text_field,
    id_field,
    ngram,
    min_overlap,
    near_duplicates,
    workers,
    scheduler,
    out,
):
    """Scan training corpora for held-out eval answers; exit 1 when any answer leaked.

    The training pipeline runs this before it uses any text.
    """
    from honestci.audit.checks.corpus_files import parse_storage_options
    from honestci.audit.checks.leakage import NEAR_SHINGLE, scan_corpus, scan_corpus_dask
    from honestci.audit.checks.ngram_index import build_index
    from honestci.audit.gates import gate_leakage
    from honestci.audit.progress import Progress

    if workers > 0 and scheduler:
        raise InputError("--workers and --scheduler both given", fix="start a local cluster or attach to one, not both")
    options = parse_storage_options(storage_options)
    items = _read_eval_items(Path(eval_file), eval_id, eval_text)
    index = build_index(items, ngram)
    near_index = build_index(items, NEAR_SHINGLE) if near_duplicates else None
    common = dict(
        text_field=text_field,
        id_field=id_field,
        min_overlap=min_overlap,
        near_index=near_index,
        progress=Progress(),
        storage_options=options,
    )
    if workers > 0 or scheduler:
        from contextlib import ExitStack

        from honestci.audit.errors import require_extra

        require_extra(
            "distributed", "distributed", needed_by="a Dask scan (--workers, --scheduler)", instead="pass --workers 0"
        )
        from distributed import Client, LocalCluster

        with ExitStack() as stack:
            if scheduler:
                try:
                    client = stack.enter_context(Client(scheduler, timeout="30s"))
                except OSError as exc:
                    raise InputError(
                        f"cannot reach the Dask scheduler at {scheduler} ({exc})",
                        fix="start it with `dask scheduler` and pass its address (tcp://HOST:8786)",
                    ) from exc
            else:
                import dask

                # Dask's sampling profiler cost a worker 0.1-0.3 CPU-s per 400 MB scan (docs/leakage.md)
                stack.enter_context(dask.config.set({"distributed.worker.profile.enabled": False}))
                cluster = stack.enter_context(
                    LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None)
                )
                client = stack.enter_context(Client(cluster))
            scan = scan_corpus_dask(index, corpora, client, **common)
    else:
        scan = scan_corpus(index, corpora, **common)
    click.echo(str(scan))
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        scan.items.to_csv(Path(out) / "leakage_items.csv", index=False)
        scan.documents.to_csv(Path(out) / "leakage_documents.csv", index=False)
    exit_by_gate(gate_leakage(scan))


def _read_eval_items(path: Path, id_column: str, text_column: str) -> dict[str, str]:
    import pandas as pd

    if not path.is_file():
        raise InputError(f"{path}: eval file not found", fix="pass a JSONL, CSV or Parquet file of eval items")
    name = path.name.lower()
    try:
        if name.endswith(".parquet"):
            frame = pd.read_parquet(path)
        elif name.endswith(".csv"):
            frame = pd.read_csv(path)
        else:
            frame = pd.read_json(path, lines=True)
    except ValueError as exc:
        raise InputError(f"{path}: cannot be read ({exc})", fix="pass JSONL, CSV or Parquet") from exc
    missing = [c for c in (id_column, text_column) if c not in frame.columns]
    if missing:
        raise InputError(
            f"{path}: no column(s) {', '.join(missing)}",
            fix=f"name the id and text columns (--eval-id, --eval-text); columns: {', '.join(frame.columns)}",
        )
    frame = frame[frame[text_column].notna()]
    return dict(zip(frame[id_column].astype(str), frame[text_column].astype(str)))


COMMANDS = (winners_curse, leakage)
