"""YAML job configs with command-line overrides, validated into frozen dataclasses.

A job is a config/trainer/script triple, as in TRL: a dataclass of the job's settings
(:class:`honestci.training.reward_models.RewardModelJob`, :class:`honestci.training.grpo.GRPOJob`), the trainer it
drives (TRL's ``RewardTrainer`` / ``GRPOTrainer``), and a click command (``honestci train …``). A
config file is a YAML mapping (read by the core's hardened YAML reader) whose keys are the dataclass's fields,
each with its help text in ``field(metadata={"help": ...})`` (:func:`field_help`); values are checked against the field's type
(a quoted ``"false"`` is not a bool, ``true`` is not a number, a float must be finite). The ``trainer:``
block passes further keys to TRL's config class, from an allowlist (:data:`TRAINER_KEY_GROUPS`: optimiser,
schedule, checkpoint and memory settings); every other key is refused by name when the config is read,
the job's own fields and the keys it sets or checks itself with their reasons (:func:`check_trainer_block`),
so no check can be stepped around. Overrides are ``KEY=VALUE`` (``--set beta=0.05``,
``--set trainer.warmup_ratio=0.1``) with VALUE parsed as YAML. Relative paths in a file resolve against
the file's folder.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, Union

import yaml

from honestci.audit.data.yaml_io import read_yaml_mapping as read_yaml
from honestci.audit.errors import InputError, Problem

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

#: A job's settings: a dataclass (its fields are the config's keys).
T = TypeVar("T", bound="DataclassInstance")

#: What training imports from the train extra (the transformers Trainer needs accelerate).
TRAIN_MODULES = ("torch", "transformers", "trl", "accelerate", "datasets")


class TrainingConfigError(InputError):
    """A training config that cannot run as written (bad value, unknown key, impossible combination)."""


def field_help(schema: type) -> dict[str, str]:
    """Each field of the job ``schema`` and its help text (for docs and ``--help``-style listings)."""
    return {f.name: f.metadata.get("help", "") for f in dataclasses.fields(schema)}


def parse_overrides(overrides: Sequence[str]) -> dict[str, Any]:
    """``["a=1", "trainer.b=x"]`` -> ``{"a": 1, "trainer": {"b": "x"}}`` (values parsed as YAML)."""
    out: dict[str, Any] = {}
    problems = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            problems.append(Problem("--set", None, item, "not KEY=VALUE", "write --set key=value"))
            continue
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            problems.append(Problem("--set", None, key, f"value is not YAML ({exc})", "quote the value"))
            continue
        target = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                problems.append(Problem("--set", None, key, f"{part} is set both as a value and a block", ""))
                break
        else:
            target[parts[-1]] = value
    if problems:
        raise TrainingConfigError("Bad --set override(s).", problems)
    return out


def _merge(base: dict, extra: dict) -> dict:
    merged = dict(base)
    for key, value in extra.items():
        merged[key] = (
            _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
        )
    return merged


def read_yaml_mapping(path: str | Path) -> dict:
    """A YAML file that must hold a mapping (an empty file is an empty one), read by the core's
    hardened reader; every failure is a :class:`TrainingConfigError`."""
    return read_yaml(path, "Config file", TrainingConfigError, empty_ok=True)


def build_config(
    schema: type[T], values: dict, *, source: str, base_dir: Path | None = None, block: str | None = None
) -> T:
    """Instantiate the dataclass ``schema`` from ``values``, naming unknown keys and bad values.

    ``block`` names the block of an enclosing config that ``values`` came from (the pipeline's
    ``grpo``): every key in an error is then named within it (``grpo.trainer.beta``).

    Fields whose annotation mentions ``Path`` are resolved against ``base_dir`` when relative.
    The dataclass's ``__post_init__`` raises :class:`TrainingConfigError` for invalid values.
    """
    if block is not None:
        try:
            return build_config(schema, values, source=source, base_dir=base_dir)
        except TrainingConfigError as exc:
            renamed = [dataclasses.replace(p, field=f"{block}.{p.field}" if p.field else block) for p in exc.problems]
            message = exc.message.replace("config: ", f"config: {block}.", 1) if renamed else exc.message
            raise TrainingConfigError(message, renamed, fix=exc.fix) from None
    fields = {f.name: f for f in dataclasses.fields(schema)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise TrainingConfigError(
            f"{source}: unknown key(s) {unknown}.",
            [Problem(source, None, key, "unknown key") for key in unknown],
            fix=f"known keys: {sorted(fields)}",
        )
    hints = typing.get_type_hints(schema)
    kwargs = {}
    for name, value in values.items():
        if isinstance(value, (str, Path)) and "Path" in str(hints.get(name, "")):
            path = Path(str(value)).expanduser()
            value = path if (base_dir is None or path.is_absolute()) else (base_dir / path)
        elif isinstance(value, list) and "tuple" in str(hints.get(name, "")):
            value = tuple(value)
        problem = _type_problem(value, hints[name])
        if problem and value is None:
            refuse(name, f"must be {_type_name(hints[name])}, not null", f"give {name} a value or leave it out")
        if problem:
            refuse(name, f"is {value!r}: {problem}", f"give {name} as {_type_name(hints[name])}")
        kwargs[name] = value
    try:
        return schema(**kwargs)
    except TypeError as exc:
        raise TrainingConfigError(f"{source}: {exc}.", fix="check the config against its documented keys") from None


def _type_name(hint: Any) -> str:
    """A readable name of the annotation ``hint`` ("a number or null")."""
    names = {bool: "true or false", int: "a whole number", float: "a number", str: "a string", Path: "a path"}
    union = typing.get_origin(hint) in (Union, types.UnionType)
    options = [o for o in typing.get_args(hint) if o is not type(None)] if union else [hint]
    words = [names.get(o) or ("a list" if typing.get_origin(o) is tuple else "a mapping") for o in options]
    return " or ".join(words) + (" or null" if union and type(None) in typing.get_args(hint) else "")


def _type_problem(value: Any, hint: Any) -> str:
    """Why ``value`` does not fit the annotation ``hint`` ("" when it does).

    Strict where YAML or Python would coerce silently: a bool is not a number (``beta: true`` would
    pass ``beta > 0``), a string is not a bool (``"false"`` is truthy), NaN and infinities are not
    settings.
    """
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return ""
        problems = [_type_problem(value, option) for option in options if option is not type(None)]
        return "" if "" in problems else problems[0]
    if value is None:
        return "null is not allowed"
    if hint is bool:
        return "" if isinstance(value, bool) else "not true/false"
    if hint is int:
        return "" if isinstance(value, int) and not isinstance(value, bool) else "not a whole number"
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "not a number"
        return "" if math.isfinite(value) else "not a finite number"
    if hint is str:
        return "" if isinstance(value, str) else "not a string"
    if hint is Path:
        return "" if isinstance(value, Path) else "not a path"
    if origin is tuple or hint is tuple:
        if not isinstance(value, tuple):
            return "not a list"
        (item, *_) = typing.get_args(hint) or (Any,)
        return next((f"item {v!r} is {p}" for v in value if (p := _type_problem(v, item))), "")
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            return "not a mapping"
        return "" if all(isinstance(k, str) for k in value) else "has keys that are not strings"
    return ""


#: The ``trainer:`` keys a job lets a user set, by group, each with why it cannot shape the evidence:
#: they change how the optimiser follows the gradient or how the same computation is laid out on the
#: machine, never what is sampled, rewarded, penalised, logged or kept. Each job allows these minus
#: its own fields and the keys it sets itself (:func:`trainer_allowlist`); every other key is
#: refused by name (:func:`check_trainer_block`).
TRAINER_KEY_GROUPS: dict[str, tuple[tuple[str, ...], str]] = {
    "optimiser": (
        ("optim", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm"),
        "how each step follows the gradient, not what the gradient is of",
    ),
    "schedule": (
        ("lr_scheduler_type", "warmup_steps"),
        "how the job's learning_rate is spread over its steps (a warmup_steps below 1 is a ratio of them)",
    ),
    "batching": (
        ("gradient_accumulation_steps",),
        "how many examples make one step; GRPO sets it itself (it is checked against num_generations)",
    ),
    "checkpoints": (
        ("save_strategy", "save_steps", "save_total_limit", "save_only_model"),
        "what is written on the way; the trained weights at the end are the same",
    ),
    "memory and speed": (
        (
            "activation_checkpointing",
            "gradient_checkpointing",
            "dataloader_num_workers",
            "dataloader_pin_memory",
            "tf32",
            "torch_empty_cache_steps",
        ),
        "the same computation laid out for the machine",
    ),
}


def trainer_allowlist(
    schema: type, owned: dict[str, str], groups: dict[str, tuple[tuple[str, ...], str]] = TRAINER_KEY_GROUPS
) -> dict[str, str]:
    """The ``trainer:`` keys a user may set in the job ``schema``, each with its group's why: the
    keys of ``groups`` that are neither one of the job's fields nor a key it owns (``owned``)."""
    fields = {f.name for f in dataclasses.fields(schema)}
    return {
        key: f"{group}: {why}"
        for group, (keys, why) in groups.items()
        for key in keys
        if key not in fields and key not in owned
    }


def check_trainer_block(
    trainer: Any, schema: type, allowed: dict[str, str], owned: dict[str, str], *, field_name: str = "trainer"
) -> None:
    """Refuse a ``trainer:`` block that is not a mapping, or that sets a key not in ``allowed``.

    Every key is refused by name, with why: one of ``schema``'s fields (set at the top level, where
    its check runs), a key of ``owned`` (one the job sets itself, or one that would undo a job-level
    check; its value says why), or any other key not in ``allowed`` (:func:`trainer_allowlist`).
    Raises :class:`TrainingConfigError` naming ``trainer.KEY``.
    """
    if not isinstance(trainer, dict):
        refuse(field_name, f"is {trainer!r}; it must be a mapping of TRL config keys", "write trainer: {} for none")
    fields = {f.name for f in dataclasses.fields(schema)}
    problems = []
    for key in sorted(trainer, key=str):
        if key in fields:
            reason = f"it shadows the job-level key {key}, which the job checks (set it beside the trainer block)"
        elif key in owned:
            reason = owned[key]
        elif key in allowed:
            continue
        else:
            reason = (
                "it is not on the job's allowlist of trainer keys, which lets through only settings that cannot "
                "change what is trained (optimiser, schedule, memory and the like)"
            )
        problems.append(Problem("config", None, f"{field_name}.{key}", reason))
    if problems:
        refuse_keys(problems, f"the trainer block takes only {sorted(allowed)}; set job keys at the top level")


def refuse_keys(problems: list[Problem], fix: str, source: str | Path = "") -> NoReturn:
    """Raise :class:`TrainingConfigError` for keys that cannot be set: one line naming ``source`` (the
    config file, when known), the keys and why (the reason itself when there is one key)."""
    keys = ", ".join(str(p.field) for p in problems)
    why = problems[0].message if len(problems) == 1 else "the reasons below"
    where = f" {source}" if source else ""
    raise TrainingConfigError(f"Invalid training config{where}: {keys} cannot be set: {why}.", problems, fix=fix)


def load_config(schema: type[T], path: str | Path, overrides: Sequence[str] = ()) -> T:
    """Read ``path`` (YAML), apply ``overrides`` (``KEY=VALUE``), validate into ``schema``.

    Every error names ``path`` (an override's key is checked as the file's: the run reads them as one).
    """
    path = Path(path)
    values = _merge(read_yaml_mapping(path), parse_overrides(overrides))
    try:
        return build_config(schema, values, source=str(path), base_dir=path.resolve().parent)
    except TrainingConfigError as exc:
        named = [dataclasses.replace(p, file=str(path)) if p.file == "config" else p for p in exc.problems]
        message = exc.message.replace("Invalid training config:", f"Invalid training config {path}:", 1)
        raise TrainingConfigError(message, named, fix=exc.fix) from None


def refuse(field: str, message: str, fix: str = "") -> NoReturn:
    """Raise :class:`TrainingConfigError` naming ``field`` (what :func:`require` raises; call it
    directly where the check also narrows a type, e.g. ``if path is None: refuse(...)``)."""
    raise TrainingConfigError(
        f"Invalid training config: {field} {message}.", [Problem("config", None, field, message)], fix=fix
    )


def require(condition: bool, field: str, message: str, fix: str = "") -> None:
    """Raise :class:`TrainingConfigError` naming ``field`` unless ``condition`` holds."""
    if not condition:
        refuse(field, message, fix)


def to_plain(config) -> dict:
    """A JSON/YAML-safe dict of a config dataclass (paths as strings), for the run's record."""

    def plain(value):
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return {f.name: plain(getattr(config, f.name)) for f in dataclasses.fields(config)}
