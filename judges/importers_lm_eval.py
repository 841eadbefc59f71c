"""The importer of lm-evaluation-harness ``--log_samples`` files: per-item scores of two or more models
as metric contests (format ``lm_eval``, :mod:`honestci.judges.importers`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from honestci.audit.errors import InputError
from honestci.judges.importers import (
    Collector,
    ImportedTables,
    at_path,
    is_missing,
    json_or_jsonl_records,
    metric_contests,
    named_paths,
    per_item_score,
)

_LM_EVAL_NON_METRIC = {
    "doc_id",
    "doc",
    "target",
    "arguments",
    "resps",
    "filtered_resps",
    "filter",
    "metrics",
    "doc_hash",
    "prompt_hash",
    "target_hash",
}
_LM_EVAL_NAME = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.jsonl(\.gz)?$")


def import_lm_eval(
    paths: Sequence[str | Path],
    metric: str | None = None,
    cluster_key: str | None = None,
    filter_name: str | None = None,
) -> ImportedTables:
    """lm-evaluation-harness ``--log_samples`` files (``samples_<task>_<date>.jsonl``), one per model,
    → metric contests between the models on each document.

    The model is the file's folder (lm-eval writes ``<output_path>/<model>/samples_...``) unless
    given as ``NAME=PATH``. ``metric`` picks the per-sample key (``acc``, ``exact_match``...; default:
    the only one). Cluster (vignette) = ``doc_id``, or the value at ``cluster_key``, a dotted path
    into ``doc``. Records per filter (``filter``) are told apart by ``filter_name`` when a file has
    several. Verdicts: the higher per-sample score wins, equal scores tie (see
    :func:`~honestci.judges.importers.metric_contests`).
    """
    out = Collector()
    scored: dict[str, dict] = {}
    tasks = set()
    chosen_metric = metric
    for name, path in named_paths(paths):
        match = _LM_EVAL_NAME.match(path.name)
        task = match["task"] if match else path.name.split(".")[0]
        tasks.add(task)
        system = name or path.resolve().parent.name
        if system in scored:
            raise InputError(f"{path}: model {system!r} given twice.", fix="pass each model's file once, as NAME=PATH")
        items: dict = {}
        scored[system] = items
        for number, rec in json_or_jsonl_records(path, out, "samples"):
            where = (path, number)
            filt = rec.get("filter")
            if filter_name is not None and filt != filter_name:
                continue
            if is_missing(rec.get("doc_id")) or isinstance(rec.get("doc_id"), (dict, list)):
                out.problem(path, number, "doc_id", "missing or not an id", "pass an unchanged --log_samples file")
                continue
            if chosen_metric is None:
                names = [k for k in rec if k not in _LM_EVAL_NON_METRIC]
                if len(names) != 1:
                    raise InputError(
                        f"{path}, line {number}: per-sample metrics {names}; which one is the score?",
                        fix="pass --metric NAME",
                    )
                chosen_metric = names[0]
            if chosen_metric not in rec:
                out.problem(path, number, chosen_metric, "missing", "pick a metric every sample has (--metric)")
                continue
            score = per_item_score(rec[chosen_metric])
            if isinstance(score, str):
                out.problem(
                    path,
                    number,
                    chosen_metric,
                    score,
                    "pick a per-sample metric (acc, exact_match...), not a corpus one",
                )
                continue
            doc = rec.get("doc") if isinstance(rec.get("doc"), dict) else {}
            if cluster_key is None:
                vid, text = str(rec["doc_id"]), json.dumps(doc, ensure_ascii=False, sort_keys=True)
            else:
                try:
                    value = at_path(doc, cluster_key)
                except KeyError as exc:
                    out.problem(
                        path, number, f"doc.{cluster_key}", f"absent (no {exc.args[0]!r})", "check --cluster-key"
                    )
                    continue
                vid, text = f"{task}:{value}", f"{cluster_key} = {value}"
            key = (task, str(rec["doc_id"]))
            if key in items:
                out.problem(
                    path,
                    number,
                    "doc_id",
                    f"doc {rec['doc_id']!r} appears twice (first at line {items[key][3][1]})",
                    "several filters: choose one with --filter" if filt is not None else "pass an unchanged file",
                )
                continue
            response_id = f"{task}:{rec['doc_id']}:{system}"
            out.vignette(vid, text, task, where)
            resps = rec.get("filtered_resps", rec.get("resps"))
            out.response(
                response_id,
                vid,
                system,
                resps if isinstance(resps, str) else json.dumps(resps, ensure_ascii=False),
                where,
            )
            items[key] = (vid, response_id, score, where, {"doc_id": str(rec["doc_id"])})
    if out.problems:
        raise InputError("The lm-evaluation-harness samples cannot be imported.", out.problems)
    metric_contests(out, f"lm_eval:{chosen_metric}", scored, ("doc_id",))
    return out.result("lm_eval", "The lm-evaluation-harness samples cannot be imported.", ("doc_id",))
