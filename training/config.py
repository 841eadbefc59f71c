"""YAML job configs with command-line overrides, validated into frozen dataclasses.

A job is a config/trainer/script triple, as in TRL: a dataclass of the job's settings
(:class:`honestci.training.reward_models.RewardModelJob`, :class:`honestci.training.grpo.GRPOJob`), the trainer it
drives (TRL's ``RewardTrainer`` / ``GRPOTrainer``), and a click command (``honestci train …``). A
config file is a YAML mapping (read by the core's hardened YAML reader) whose keys are the dataclass's fields; the
free-form ``trainer:`` block is passed to TRL's config class, which rejects unknown keys by name.
Overrides are ``KEY=VALUE`` (``--set beta=0.05``, ``--set trainer.warmup_ratio=0.1``) with VALUE
parsed as YAML. Relative paths in a file resolve against the file's folder.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

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


def build_config(schema: type[T], values: dict, *, source: str, base_dir: Path | None = None) -> T:
    """Instantiate the dataclass ``schema`` from ``values``, naming unknown keys and bad values.

    Fields whose annotation mentions ``Path`` are resolved against ``base_dir`` when relative.
    The dataclass's ``__post_init__`` raises :class:`TrainingConfigError` for invalid values.
    """
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
        if value is not None and base_dir is not None and "Path" in str(hints.get(name, "")):
            path = Path(str(value)).expanduser()
            value = path if path.is_absolute() else (base_dir / path)
        elif value is not None and "Path" in str(hints.get(name, "")):
            value = Path(str(value))
        elif isinstance(value, list) and "tuple" in str(hints.get(name, "")):
            value = tuple(value)
        kwargs[name] = value
    try:
        return schema(**kwargs)
    except TypeError as exc:
        raise TrainingConfigError(f"{source}: {exc}.", fix="check the config against its documented keys") from None


def load_config(schema: type[T], path: str | Path, overrides: Sequence[str] = ()) -> T:
    """Read ``path`` (YAML), apply ``overrides`` (``KEY=VALUE``), validate into ``schema``."""
    path = Path(path)
    values = _merge(read_yaml_mapping(path), parse_overrides(overrides))
    return build_config(schema, values, source=str(path), base_dir=path.resolve().parent)


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
