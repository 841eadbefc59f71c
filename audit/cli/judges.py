"""``honestci judge`` and ``honestci import`` as click commands.

``judge_command`` and ``import_command`` are registered in the main ``honestci`` group by
``audit/cli.py``; ``python -m honestci.audit.cli.judges`` runs them stand-alone. Bad input raises
:class:`honestci.audit.errors.InputError` (file, line, field); it is printed without a traceback, exit 2.
"""

from __future__ import annotations

from pathlib import Path

import click

from honestci.audit.cli.support import fail_cleanly as _fail_cleanly
from honestci.audit.cli.support import seed_option
from honestci.audit.errors import InputError


def _pairs(values: tuple[str, ...], option: str) -> dict[str, str]:
    out = {}
    for value in values:
        key, sep, target = value.partition("=")
        if not sep or not key or not target:
            raise InputError(f"{option} {value!r} is not KEY=VALUE.", fix=f"write {option} KEY=VALUE")
        out[key] = target
    return out


@click.command("judge")
@click.argument("contests", type=click.Path(path_type=Path))
@click.option("--vignettes", type=click.Path(path_type=Path), required=True, help="Vignettes table.")
@click.option("--responses", type=click.Path(path_type=Path), required=True, help="Responses table.")
@click.option(
    "--out",
    "out_path",
    type=click.Path(path_type=Path),
    required=True,
    help="Judgments table to write (.jsonl, .csv or .parquet), atomically at the end.",
)
@click.option(
    "--backend",
    type=click.Choice(["openai", "vllm", "transformers", "replay"]),
    default="openai",
    show_default=True,
    help="vllm = an OpenAI-compatible vLLM server (see judges/vllm_server.md).",
)
@click.option(
    "--base-url",
    "base_urls",
    multiple=True,
    help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1; repeat it to spread the judging over "
    "several servers of the same model (least-loaded first; a failing one is cooled down).",
)
@click.option(
    "--endpoints",
    "endpoints_path",
    type=click.Path(path_type=Path),
    help="YAML file listing endpoints with budgets (base_url, model, api_key_env, max_concurrency, "
    "requests_per_minute, tokens_per_minute); instead of --base-url.",
)
@click.option(
    "--batch",
    "use_batch",
    is_flag=True,
    help="Send every pending judgment as one OpenAI Batch API job (files + batches endpoints) and wait for it.",
)
@click.option(
    "--batch-poll",
    type=click.FloatRange(min=0.001),
    default=30.0,
    show_default=True,
    help="With --batch: seconds between status checks.",
)
@click.option(
    "--cooldown",
    "cooldown_s",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="With several endpoints: seconds a failing endpoint gets no requests.",
)
@click.option("--model", help="Judge model name (sent to the server; the judge column).")
@click.option(
    "--api-key-env",
    default="OPENAI_API_KEY",
    show_default=True,
    help="Environment variable holding the API key (the key itself is never logged or stored).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 1024),
    default=8,
    show_default=True,
    help="Requests in flight (per endpoint with several endpoints).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0.001),
    default=60.0,
    show_default=True,
    help="Per-request timeout in seconds.",
)
@click.option("--max-retries", type=click.IntRange(0, 100), default=5, show_default=True)
@click.option(
    "--backoff-base",
    type=click.FloatRange(min=0),
    default=0.5,
    show_default=True,
    help="First retry delay in seconds (doubles each retry, with jitter).",
)
@click.option("--backoff-cap", type=click.FloatRange(min=0), default=30.0, show_default=True)
@click.option("--model-path", type=click.Path(path_type=Path), help="Local model folder (transformers backend).")
@click.option("--device", default="cpu", show_default=True, help="transformers backend device.")
@click.option("--replay", "replay_path", type=click.Path(path_type=Path), help="Judgments file (replay backend).")
@click.option("--judge", "judge_name", help="Judge name (replay: which judge to replay; transformers: the name).")
@click.option("--template", default=None, help="Template label or YAML file (default: reappraisal-effectiveness@v1).")
@click.option("--temperature", type=float, default=0.0, show_default=True)
@click.option("--max-tokens", type=click.IntRange(1), default=512, show_default=True)
@seed_option
@click.option(
    "--cache",
    "cache_path",
    type=click.Path(path_type=Path),
    default=None,
    help="SQLite cache (default: OUT.cache.sqlite); a rerun resumes from it.",
)
@click.option("--retry-failed", is_flag=True, help="Ask again for calls cached as failed after every retry.")
@click.option(
    "--progress/--no-progress",
    default=True,
    show_default=True,
    help="Progress on stderr: a live bar on a terminal, else a line with rate and ETA every 10 s or 10%.",
)
@_fail_cleanly
def judge_command(
    contests,
    vignettes,
    responses,
    out_path,
    template,
    temperature,
    max_tokens,
    seed,
    cache_path,
    retry_failed,
    progress,
    **backend_options,
):
    """Judge every contest in CONTESTS (vignette_id, response_a, response_b) in both orders."""
    from honestci.judges.prompts import DEFAULT_TEMPLATE, get_template
    from honestci.judges.run import load_texts, run_judging

    chosen_template = get_template(template or DEFAULT_TEMPLATE)
    texts = load_texts(vignettes, responses)
    judge, fleet = _judge_backend(seed=seed, **backend_options)
    summary = run_judging(
        contests,
        texts,
        judge,
        chosen_template,
        out_path,
        cache_path=cache_path,
        seed=seed,
        sampling={"temperature": temperature, "max_tokens": max_tokens},
        retry_failed=retry_failed,
        progress=progress,
    )
    click.echo(str(summary), err=True)
    if fleet is not None:
        click.echo("per endpoint:\n" + fleet.endpoint_table().to_string(index=False), err=True)
    click.echo(str(out_path))


def _judge_backend(
    *,
    backend,
    base_urls,
    endpoints_path,
    use_batch,
    batch_poll,
    cooldown_s,
    model,
    api_key_env,
    concurrency,
    timeout_s,
    max_retries,
    backoff_base,
    backoff_cap,
    model_path,
    device,
    replay_path,
    judge_name,
    seed,
):
    """The judge that the backend options of ``honestci judge`` describe (keyword for keyword), and
    the fleet behind it when it spreads the judging over several endpoints (else None).

    Its parameters are unannotated, as the commands' are: the checks here, not the types, make
    sure that ``--model`` is given wherever a backend needs it."""
    fleet = None
    if use_batch and backend not in ("openai", "vllm"):
        raise InputError(f"--batch needs --backend openai, not {backend}.", fix="drop --batch or use --backend openai")
    if backend in ("openai", "vllm"):
        if endpoints_path is not None and base_urls:
            raise InputError("Give --endpoints or --base-url, not both.", fix="list every endpoint in the file")
        if endpoints_path is None and (not base_urls or not model):
            raise InputError(
                f"--backend {backend} needs --base-url and --model (or --endpoints FILE).",
                fix="e.g. --base-url http://127.0.0.1:8000/v1 --model meta-llama/Llama-3.1-70B-Instruct",
            )
        if use_batch:
            if endpoints_path is not None or len(base_urls) > 1:
                raise InputError("--batch sends one job to one server.", fix="give a single --base-url")
            from honestci.judges.backends.batch import OpenAIBatchBackend

            judge = OpenAIBatchBackend(
                base_urls[0], model, api_key_env=api_key_env, poll_s=batch_poll, timeout_s=timeout_s
            )
        elif endpoints_path is not None or len(base_urls) > 1:
            from honestci.judges.backends.fleet import Endpoint, FleetBackend, load_endpoints

            if endpoints_path is not None:
                endpoints = load_endpoints(
                    endpoints_path, model=model, api_key_env=api_key_env, max_concurrency=concurrency
                )
            else:
                endpoints = [Endpoint(url, model, api_key_env, concurrency) for url in base_urls]
            judge = fleet = FleetBackend(
                endpoints,
                timeout_s=timeout_s,
                max_retries=max_retries,
                backoff_base_s=backoff_base,
                backoff_cap_s=backoff_cap,
                cooldown_s=cooldown_s,
                seed=seed,
            )
        else:
            from honestci.judges.backends.openai_http import OpenAICompatibleBackend

            judge = OpenAICompatibleBackend(
                base_urls[0],
                model,
                api_key_env=api_key_env,
                concurrency=concurrency,
                timeout_s=timeout_s,
                max_retries=max_retries,
                backoff_base_s=backoff_base,
                backoff_cap_s=backoff_cap,
                seed=seed,
            )
    elif backend == "transformers":
        if model_path is None:
            raise InputError("--backend transformers needs --model-path.", fix="pass a saved model folder")
        from honestci.judges.backends.transformers_local import TransformersBackend

        judge = TransformersBackend(model_path, device=device, judge_name=judge_name or model, seed=seed)
    else:
        if replay_path is None:
            raise InputError("--backend replay needs --replay FILE.", fix="pass a judgments file")
        from honestci.judges.backends.replay import ReplayBackend

        judge = ReplayBackend(replay_path, judge=judge_name)
    return judge, fleet


def _import_alpaca_eval(paths, options):
    from honestci.judges.importers_alpaca import import_alpaca_eval

    return import_alpaca_eval(paths)


def _import_pandalm(paths, options):
    from honestci.judges.importers_alpaca import import_pandalm, pandalm_judge_name

    files = {}
    for spec in options["judge_files"]:
        name, sep, path = spec.rpartition("=")
        files[name if sep else pandalm_judge_name(Path(path))] = Path(path)
    return import_pandalm(paths[0], files)


def _import_mtbench(paths, options):
    from honestci.judges.importers_fastchat import import_mtbench

    return import_mtbench(paths[0], questions=options["questions"], answers_dir=options["answers"])


def _import_arena(paths, options):
    from honestci.judges.importers_fastchat import import_arena

    return import_arena(paths[0])


def _import_lm_eval(paths, options):
    from honestci.judges.importers_lm_eval import import_lm_eval

    return import_lm_eval(
        paths, metric=options["metric"], cluster_key=options["cluster_key"], filter_name=options["filter_name"]
    )


def _import_inspect(paths, options):
    from honestci.judges.importers_inspect import import_inspect

    return import_inspect(paths, scorer=options["metric"], cluster_key=options["cluster_key"])


def _import_generic(paths, options):
    from honestci.judges.importers_generic import import_generic

    return import_generic(
        paths[0],
        _pairs(options["mapping"], "--map"),
        _pairs(options["verdict_map"], "--verdict-map") or None,
        judge=options["judge_name"],
    )


#: Every import format (``honestci import FORMAT``), in the order ``--help`` lists them: the paths
#: and the command's options (click's parameters by name) → the tables. Adding a format is its importer module and its entry here.
IMPORTERS = {
    "alpaca_eval": _import_alpaca_eval,
    "pandalm": _import_pandalm,
    "mtbench": _import_mtbench,
    "arena": _import_arena,
    "lm_eval": _import_lm_eval,
    "inspect": _import_inspect,
    "generic": _import_generic,
}
#: The formats that read several files at once.
MULTI_PATH_FORMATS = ("alpaca_eval", "lm_eval", "inspect")


@click.command("import")
@click.argument("fmt", metavar="FORMAT", type=click.Choice(tuple(IMPORTERS)))
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out",
    "out_path",
    type=click.Path(path_type=Path),
    required=True,
    help="Judgments table; vignettes/responses/human_pairs go beside it (OUT.vignettes.jsonl ...).",
)
@click.option(
    "--judge-file",
    "judge_files",
    multiple=True,
    help="pandalm: a judge result file, as PATH or NAME=PATH (repeatable).",
)
@click.option("--questions", type=click.Path(path_type=Path), help="mtbench: question.jsonl (writes vignettes).")
@click.option("--answers", type=click.Path(path_type=Path), help="mtbench: model_answer/ folder (writes responses).")
@click.option("--map", "mapping", multiple=True, help="generic: TARGET=SOURCE column (repeatable).")
@click.option(
    "--verdict-map", "verdict_map", multiple=True, help="generic: SOURCE_VALUE=first|second|tie|invalid (repeatable)."
)
@click.option("--judge", "judge_name", help="generic: constant judge name.")
@click.option(
    "--metric", help="lm_eval: the per-sample metric (acc, exact_match...); inspect: the scorer. Default: the only one."
)
@click.option(
    "--cluster-key",
    help="lm_eval: dotted path into `doc` whose value is the cluster (default: doc_id); "
    "inspect: dotted path into the sample's metadata (default: the sample id).",
)
@click.option("--filter", "filter_name", help="lm_eval: the filter to read when a file holds several.")
@click.option(
    "--candidate",
    "candidates",
    multiple=True,
    help="Any format: a system whose responses were candidates of a selection (best-of-n, checkpoints, "
    "prompts); marks them with a pool for the winner's-curse analysis (repeatable).",
)
@click.option(
    "--heldout-fraction",
    type=click.FloatRange(0.0, 1.0, max_open=True),
    default=0.0,
    show_default=True,
    help="With --candidate: the fraction of the vignettes, drawn at random (--seed), whose candidate "
    "responses form the held-out pool; the rest form the selection pool.",
)
@seed_option
@_fail_cleanly
def import_command(
    fmt,
    paths,
    out_path,
    judge_files,
    questions,
    answers,
    mapping,
    verdict_map,
    judge_name,
    metric,
    cluster_key,
    filter_name,
    candidates,
    heldout_fraction,
    seed,
):
    """Import judgments or per-item scores made by another tool (FORMAT below).

    \b
    Writes honestci's tables (docs/data-formats.md). FORMAT and PATHS:
      alpaca_eval  annotations.json(.gz) files or folders, one or many (several
                   baselines' texts become distinct responses)
      pandalm      testset-v1.json (+ --judge-file for each judge)
      mtbench      FastChat model_judgment/*_pair.jsonl (+ --questions, --answers)
      arena        FastChat Arena battles: clean_battle_*.json (or .jsonl), one
                   judged order per battle, model_a shown first
      lm_eval      lm-evaluation-harness --log_samples samples_<task>_<date>.jsonl,
                   one per model (model = folder, or NAME=PATH); --metric,
                   --cluster-key, --filter
      inspect      inspect_ai eval logs (.eval or .json): pairwise scorers (model_a,
                   model_b in the score metadata) as judgments by the grader role;
                   graded scorers as metric contests, one log per model (model =
                   eval.model, or NAME=PATH); --metric, --cluster-key
      generic      any CSV/JSONL/Parquet with --map and --verdict-map

    \b
    --candidate marks the named systems' responses with a pool (selection, or
    heldout for a seeded --heldout-fraction of the vignettes) for the audit's
    winners_curse gate and `honestci winners-curse`.
    """
    from honestci.judges import importers

    if fmt not in MULTI_PATH_FORMATS and len(paths) > 1:
        raise InputError(f"{fmt} takes one PATH, got {len(paths)}.", fix="pass one file")
    tables = IMPORTERS[fmt](paths, click.get_current_context().params)  # the options by parameter name
    if candidates:
        tables = importers.assign_pools(tables, candidates, heldout_fraction, seed)
    elif heldout_fraction:
        raise InputError("--heldout-fraction needs --candidate.", fix="name the candidate systems (--candidate)")
    written = tables.write(out_path)
    invalid = sum(j["verdict"] == "invalid" for j in tables.judgments)
    click.echo(f"{len(tables.judgments)} judgments ({invalid} invalid, kept and counted)", err=True)
    for name, path in written.items():
        click.echo(f"{name}: {path}")


@click.group()
def _standalone() -> None:
    """honestci judging commands (stand-alone entry point)."""


_standalone.add_command(judge_command)
_standalone.add_command(import_command)

if __name__ == "__main__":
    _standalone()
