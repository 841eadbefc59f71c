"""The importer of inspect_ai eval logs (``.eval`` or ``.json``): pairwise scorers as judgments, graded
scorers as metric contests (format ``inspect``, :mod:`honestci.judges.importers`).
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path

from honestci.audit.errors import InputError, require_extra
from honestci.judges.importers import (
    Collector,
    ImportedTables,
    at_path,
    is_missing,
    load_json,
    metric_contests,
    named_paths,
    per_item_score,
)

#: inspect_ai's letter values (inspect_ai.scorer: CORRECT, INCORRECT, PARTIAL, NOANSWER) as numbers.
_INSPECT_LETTERS = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}
#: A pairwise scorer's value → the verdict: A (shown first) / B (second) / tie, or A's score 1 / 0 / ½.
_PAIRWISE_VALUES = {"a": "first", "b": "second", "tie": "tie", 1.0: "first", 0.0: "second", 0.5: "tie"}
#: ZIP compression method 93: zstd, which inspect_ai (0.3.1xx on) writes into ``.eval`` logs.
_ZIP_ZSTD = 93
#: A ZIP local file header (APPNOTE 4.3.7): 30 bytes, then the name and the extra field.
_ZIP_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")


def _zstd_decompress(data: bytes, where: str) -> bytes:
    """zstd frames (one or several) → bytes: the stdlib's ``compression.zstd`` (Python 3.14+), else
    the ``zstandard`` package of the ``inspect`` extra."""
    try:
        from compression import zstd  # type: ignore[import-not-found,unused-ignore]

        return zstd.decompress(data)
    except ImportError:
        pass
    require_extra(
        "inspect",
        "zstandard",
        needed_by=f"reading {where} (zstd-compressed, as inspect_ai writes .eval logs)",
        instead="convert the log: inspect log convert --to json",
    )
    import zstandard

    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True) as reader:
        return reader.read()


def _zip_member(path: Path, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """One member's bytes: stored and deflate members through the stdlib, zstd ones from their raw
    bytes (the stdlib reads zstd only from Python 3.14). The CRC-32 is checked either way."""
    if info.compress_type != _ZIP_ZSTD:
        return archive.read(info)
    with open(path, "rb") as handle:
        handle.seek(info.header_offset)
        fields = _ZIP_LOCAL_HEADER.unpack(handle.read(_ZIP_LOCAL_HEADER.size))
        if fields[0] != b"PK\x03\x04":
            raise zipfile.BadZipFile(f"bad local header for {info.filename}")
        handle.seek(info.header_offset + _ZIP_LOCAL_HEADER.size + fields[10] + fields[11])
        data = _zstd_decompress(handle.read(info.compress_size), f"{path}")
    if zlib.crc32(data) != info.CRC:
        raise zipfile.BadZipFile(f"CRC-32 mismatch in {info.filename}")
    return data


def _inspect_log(path: Path, out: Collector) -> tuple[dict, list[tuple[int, str, object]]]:
    """An inspect_ai log (``.json`` or zipped ``.eval``) → its header and its samples as
    (1-based position, field prefix, sample).

    ``.eval`` (inspect_ai's ``log/_recorders/eval.py``): ``header.json`` (or, in a log still being
    written, ``_journal/start.json``) holds ``eval``, ``plan``, ``results``; each sample is a member
    ``samples/{id}_epoch_{n}.json``; a member written twice (a re-run sample) counts once, the last
    write, as inspect_ai reads it. A sample's position among the members is its line, and its
    member name starts its fields (``samples/fr_epoch_1.json:scores.match.value``).
    """
    if not path.is_file():
        raise InputError(f"{path}: file not found.", fix="check the path")
    out.inputs.append(path)
    if path.suffix != ".eval":
        log = load_json(path)
        if not isinstance(log, dict) or not isinstance(log.get("eval"), dict):
            raise InputError(f"{path}: not an inspect_ai JSON log (no 'eval' object).", fix="pass a .json eval log")
        records = log.get("samples")
        if not isinstance(records, list):
            raise InputError(
                f"{path}: the log has no samples (status {log.get('status')!r}).",
                fix="pass a log written with samples (not --no-log-samples)",
            )
        return log, [(i + 1, f"samples[{i}].", sample) for i, sample in enumerate(records)]
    try:
        with zipfile.ZipFile(path) as archive:
            members = {info.filename: info for info in archive.infolist()}  # the last write of a name wins
            name = "header.json" if "header.json" in members else "_journal/start.json"
            if name not in members:
                raise InputError(
                    f"{path}: not an inspect_ai .eval log (no header.json or _journal/start.json).",
                    fix="pass an .eval log written by inspect_ai",
                )
            header = json.loads(_zip_member(path, archive, members[name]))
            samples: list[tuple[int, str, object]] = []
            names = [n for n in members if n.startswith("samples/") and n.endswith(".json")]
            for position, member in enumerate(names, start=1):
                try:
                    samples.append((position, f"{member}:", json.loads(_zip_member(path, archive, members[member]))))
                except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                    out.problem(path, position, member, f"not valid JSON ({exc})", "pass the unchanged log")
    except (zipfile.BadZipFile, OSError, EOFError, json.JSONDecodeError, zlib.error) as exc:
        raise InputError(
            f"{path}: not a readable .eval log ({exc}).", fix="pass the unchanged file, or convert it to JSON"
        ) from None
    if not isinstance(header, dict) or not isinstance(header.get("eval"), dict):
        raise InputError(f"{path}: {name} has no 'eval' object.", fix="pass an .eval log written by inspect_ai")
    if not samples and not out.problems:
        raise InputError(
            f"{path}: the log has no samples (status {header.get('status')!r}).",
            fix="pass a log written with samples (not --no-log-samples)",
        )
    return header, samples


def _role_models(eval_spec: dict) -> dict[str, str]:
    """``eval.model_roles`` → role: model name (a role bound to a list of models: names joined by +)."""
    roles = eval_spec.get("model_roles")
    named: dict[str, str] = {}
    for role, config in (roles if isinstance(roles, dict) else {}).items():
        configs = config if isinstance(config, list) else [config]
        models = [str(c["model"]) for c in configs if isinstance(c, dict) and isinstance(c.get("model"), str)]
        if models:
            named[str(role)] = "+".join(models)
    return named


def _scorer_roles(eval_spec: dict) -> dict[str, str]:
    """Scorer name → the ``model_role`` its options name (``model_graded_qa(model_role="grader")``)."""
    named = {}
    for entry in eval_spec.get("scorers") or []:
        options = entry.get("options") if isinstance(entry, dict) else None
        if isinstance(options, dict) and isinstance(options.get("model_role"), str):
            named[str(entry.get("name"))] = options["model_role"]
    return named


def _pairwise_sides(entry: object, sample: dict) -> dict | None:
    """The metadata naming the two systems a pairwise score compared (``model_a`` shown first,
    ``model_b`` second): the score's metadata, else the sample's; None for a graded score."""
    for metadata in (entry.get("metadata") if isinstance(entry, dict) else None, sample.get("metadata")):
        if isinstance(metadata, dict) and all(isinstance(metadata.get(k), str) for k in ("model_a", "model_b")):
            return metadata
    return None


def import_inspect(
    paths: Sequence[str | Path], scorer: str | None = None, cluster_key: str | None = None
) -> ImportedTables:
    """inspect_ai eval logs (``.eval`` or ``.json``) → judgments: pairwise scorers as judgments,
    graded scorers as metric contests between the logs' models.

    **Pairwise scorers** (a score whose metadata, or the sample's, names ``model_a`` and ``model_b``,
    the systems shown first and second): each such score is one judged order. Value ``A``/``B``/
    ``tie`` (any case) or A's score 1/0/0.5; a missing value (the judge's reply did not parse) is an
    invalid verdict, kept. The judge is the metadata's ``judge``, else the model bound to the
    scorer's ``model_role`` (default role ``grader``), else ``eval.model`` when it is neither
    system. Texts: metadata ``response_a``/``response_b``, else the sample's output for the side that
    is ``eval.model``. Without ``scorer``, every pairwise scorer of the log is read (a scorer run
    once per presentation order gives both orders).

    **Graded scorers** (numbers, booleans, ``C``/``I``/``P``/``N`` as 1/0/0.5/0): one log per
    model (``eval.model`` or ``NAME=PATH``), compared per (sample, epoch) as metric contests
    (:func:`~honestci.judges.importers.metric_contests`); ``scorer`` picks the score (default: the
    only one). A scorer whose options name a ``model_role`` is judged by that role's model, in the
    judge's name (``inspect:model_graded_qa@mockllm/grader``); every log must have the same one.

    Cluster (vignette) = ``task:id`` (the sample), or ``task:VALUE`` of the dotted ``cluster_key``
    in the sample's metadata; each epoch is its own contest within it. A sample that errored
    (``error`` set, no score) is an invalid verdict, kept. A sample's position in the log (1-based)
    is reported as its line.
    """
    out = Collector()
    scored: dict[str, dict] = {}
    graders: dict[str, tuple[str | None, Path]] = {}
    chosen = scorer
    for name, path in named_paths(paths):
        header, samples = _inspect_log(path, out)
        spec = header["eval"]
        system = name or str(spec.get("model") or path.stem)
        task = str(spec.get("task") or "task")
        roles, scorer_roles = _role_models(spec), _scorer_roles(spec)
        pairwise = _pairwise_scorers(samples, chosen)
        if pairwise and (chosen is None or chosen in pairwise):
            context = {"task": task, "model": str(spec.get("model")), "roles": roles, "scorer_roles": scorer_roles}
            for position, prefix, sample in samples:
                _inspect_pairwise(out, (path, position), prefix, sample, sorted(pairwise), context, cluster_key)
            continue
        if system in scored:
            raise InputError(f"{path}: model {system!r} given twice.", fix="pass each model's log once, as NAME=PATH")
        items: dict = {}
        scored[system] = items
        for position, prefix, sample in samples:
            where = (path, position)
            ids = _inspect_sample_ids(out, where, prefix, sample)
            if ids is None:
                continue
            record, sid, epoch, scores = ids
            if chosen is None and scores:
                if len(scores) != 1:
                    raise InputError(
                        f"{path}: scorers {sorted(scores)}; which one is the score?", fix="pass --metric NAME"
                    )
                chosen = next(iter(scores))
            field_name = f"{prefix}scores.{chosen}.value"
            if chosen in scores:
                entry = scores[chosen]
                value = entry.get("value") if isinstance(entry, dict) else None
                score = _INSPECT_LETTERS.get(value) if isinstance(value, str) else per_item_score(value)
                if score is None or isinstance(score, str):
                    out.problem(path, position, field_name, score or f"{value!r} is not C, I, P, N or a number")
                    continue
            elif record.get("error"):
                score = None  # the sample errored: an invalid verdict, kept and counted
            else:
                out.problem(path, position, field_name, "missing (and the sample has no error)")
                continue
            key = (str(sid), epoch)
            if key in items:
                out.problem(path, position, f"{prefix}id", f"sample {sid!r} epoch {epoch} appears twice")
                continue
            vid = _inspect_vignette(out, where, prefix, record, task, cluster_key)
            if vid is None:
                continue
            response_id = f"{task}:{sid}:{system}:epoch{epoch}"
            output = record.get("output")
            answer = output.get("completion") if isinstance(output, dict) else None
            out.response(response_id, vid, system, answer if isinstance(answer, str) else "", where)
            items[key] = (vid, response_id, score, where, {"epoch": epoch})
        role = scorer_roles.get(str(chosen))
        graders[system] = (roles.get(role) if role else None, path)
    if out.problems:
        raise InputError("The inspect_ai logs cannot be imported.", out.problems)
    if scored:
        grader = _one_grader(graders)
        metric_contests(out, f"inspect:{chosen}" + (f"@{grader}" if grader else ""), scored, ("epoch",))
    return out.result("inspect", "The inspect_ai logs cannot be imported.", ("epoch",))


def _pairwise_scorers(samples: list[tuple[int, str, object]], chosen: str | None) -> set[str]:
    """The log's pairwise scorers (a score naming ``model_a`` and ``model_b``); ``chosen`` alone when it is one."""
    pairwise = {
        key
        for _, _, sample in samples
        if isinstance(sample, dict) and isinstance(sample.get("scores"), dict)
        for key, entry in sample["scores"].items()
        if _pairwise_sides(entry, sample) is not None
    }
    if chosen is not None and chosen in pairwise:
        pairwise = {chosen}
    return pairwise


def _one_grader(graders: dict[str, tuple[str | None, Path]]) -> str | None:
    """The model that graded every log (None: no model role), from system → (grader, log path).

    Raises
    ------
    InputError
        The logs were graded by different models: their scores are not comparable.
    """
    judges = {grader for grader, _ in graders.values()}
    if len(judges) > 1:
        raise InputError(
            "The logs were graded by different models: "
            + ", ".join(f"{path} by {grader or 'no model'}" for grader, path in graders.values())
            + "; their scores are not comparable.",
            fix="import logs graded by the same grader model",
        )
    (grader,) = judges
    return grader


def _inspect_sample_ids(
    out: Collector, where: tuple[Path, int], prefix: str, sample: object
) -> tuple[dict, object, int, dict] | None:
    """(sample, id, epoch, scores) of a sample, or None after reporting what is wrong with it."""
    if not isinstance(sample, dict):
        out.problem(*where, prefix.rstrip(".:") or "samples", "is not an object")
        return None
    sid, epoch = sample.get("id"), sample.get("epoch", 1)
    if is_missing(sid) or isinstance(sid, (dict, list, bool)):
        out.problem(*where, f"{prefix}id", "missing or not an id")
        return None
    if isinstance(epoch, bool) or not isinstance(epoch, int):
        out.problem(*where, f"{prefix}epoch", f"{epoch!r} is not an integer")
        return None
    scores = sample.get("scores") or {}
    if not isinstance(scores, dict):
        out.problem(*where, f"{prefix}scores", "is not an object")
        return None
    return sample, sid, epoch, scores


def _inspect_vignette(
    out: Collector, where: tuple[Path, int], prefix: str, sample: dict, task: str, cluster_key: str | None
) -> str | None:
    """The sample's cluster: ``task:id`` with the input as text, or ``task:VALUE`` of ``cluster_key``."""
    if cluster_key is None:
        vid, text = f"{task}:{sample['id']}", sample.get("input")
        text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
    else:
        try:
            value = at_path(sample.get("metadata") or {}, cluster_key)
        except KeyError as exc:
            out.problem(
                *where, f"{prefix}metadata.{cluster_key}", f"absent (no {exc.args[0]!r})", "check --cluster-key"
            )
            return None
        vid, text = f"{task}:{value}", f"{cluster_key} = {value}"
    out.vignette(vid, text, task, where)
    return vid


def _inspect_pairwise(
    out: Collector,
    where: tuple[Path, int],
    prefix: str,
    sample: object,
    scorers: list[str],
    context: dict,
    cluster_key: str | None,
) -> None:
    """The judged orders of one sample of a pairwise log (see :func:`import_inspect`)."""
    ids = _inspect_sample_ids(out, where, prefix, sample)
    if ids is None:
        return
    sample, _sid, epoch, scores = ids
    vid = _inspect_vignette(out, where, prefix, sample, context["task"], cluster_key)
    if vid is None:
        return
    for name in scorers:
        entry = scores.get(name)
        field_name = f"{prefix}scores.{name}"
        sides = _pairwise_sides(entry, sample)
        if sides is None:
            reason = "the sample errored, and" if sample.get("error") else "missing, or its"
            out.problem(*where, field_name, f"{reason} metadata names no model_a and model_b", "record both systems")
            continue
        value = entry.get("value") if isinstance(entry, dict) else None
        if value is None:
            verdict = "invalid"  # no score (an error) or the judge's reply did not parse: kept, counted
        else:
            key = value.strip().lower() if isinstance(value, str) else value
            known = (
                _PAIRWISE_VALUES.get(key) if isinstance(key, (str, int, float)) and not isinstance(key, bool) else None
            )
            if known is None:
                out.problem(*where, f"{field_name}.value", f"{value!r} is not A, B, tie, 1, 0 or 0.5")
                continue
            verdict = known
        judge = sides.get("judge") if isinstance(sides.get("judge"), str) else None
        judge = judge or context["roles"].get(context["scorer_roles"].get(name, "grader"))
        if judge is None and context["model"] not in (sides["model_a"], sides["model_b"]):
            judge = context["model"]  # the eval's own model wrote the verdicts
        if judge is None:
            out.problem(
                *where,
                f"{field_name}.metadata.judge",
                "no judge: the eval has no grader role and its model is one of the two systems",
                "name the judge in the score's metadata, or bind it to a grader role (--model-role grader=...)",
            )
            continue
        response_ids = []
        for side, text_key in (("model_a", "response_a"), ("model_b", "response_b")):
            system, text = sides[side], sides.get(text_key)
            response_id = f"{vid}:{system}"
            if not isinstance(text, str) and system == context["model"]:
                output = sample.get("output")
                text = output.get("completion") if isinstance(output, dict) else None
                response_id += f":epoch{epoch}"  # generated in this epoch
            if not isinstance(text, str):
                out.problem(*where, f"{field_name}.metadata.{text_key}", f"no text for {system!r}", "record it there")
                break
            out.response(response_id, vid, system, text, where)
            response_ids.append(response_id)
        if len(response_ids) != 2:
            continue
        answer = entry.get("answer") if isinstance(entry, dict) else None
        out.judgment(
            {
                "judge": judge,
                "vignette_id": vid,
                "response_first": response_ids[0],
                "response_second": response_ids[1],
                "verdict": verdict,
                "raw": answer if isinstance(answer, str) else json.dumps(value),
                "prompt_sha256": None,
                "epoch": epoch,
            },
            where,
        )
