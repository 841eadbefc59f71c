"""Where corpus files live: local paths, globs and fsspec URLs (``s3://``, ``gs://``, ``hf://``, ``file://``).

The leakage scan reads its training corpora through the four functions here and nothing else:
:func:`expand_corpus` (globs → files), :func:`open_corpus` (a seekable binary handle),
:func:`corpus_size` (bytes, for progress and for splitting) and :func:`corpus_name` (the file name
used in ``<file>:<line>`` ids). Local paths are opened with the built-in ``open`` (no fsspec
needed); a URL goes through fsspec, whose protocol packages (s3fs, gcsfs, huggingface_hub, ...)
are optional. ``storage_options`` are fsspec's usual keyword arguments for the protocol's
filesystem (for S3: ``key``, ``secret``, ``endpoint_url``, ``anon``, ``client_kwargs``);
without them each package reads its own environment (``AWS_*`` variables and ``~/.aws`` for
s3fs, ``AWS_ENDPOINT_URL`` included; ``FSSPEC_<PROTOCOL>_<KEY>`` for any fsspec filesystem).
"""

from __future__ import annotations

import glob as _glob
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from honestci.audit.errors import InputError, MissingExtraError

#: The package each common protocol needs, for the error that names it.
PROTOCOL_PACKAGES = {
    "s3": "s3fs",
    "s3a": "s3fs",
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "hf": "huggingface_hub",
    "az": "adlfs",
    "abfs": "adlfs",
    "http": "aiohttp",
    "https": "aiohttp",
}
_GLOB_CHARS = frozenset("*?[")


def _protocol(url: str) -> str | None:
    """The URL's protocol (``s3``), or None for a local path (``file://`` counts as local)."""
    head, sep, _ = url.partition("://")
    head = head.split("::")[0].lower()  # a chained URL (simplecache::s3://...) by its first protocol
    if not sep or head in ("", "file", "local") or not head.replace("-", "").replace("+", "").isalnum():
        return None
    return head


def _local(url: str) -> str:
    return url[len("file://") :] if url.startswith("file://") else url


def _filesystem(url: str, storage_options: Mapping[str, Any] | None):
    """(fsspec filesystem, path inside it) of a URL, or an InputError naming what to install."""
    protocol = _protocol(url)
    try:
        import fsspec.core
    except ImportError as exc:
        raise MissingExtraError(
            "distributed", f"reading {url}", "fsspec is not installed", "copy the corpus to a local path"
        ) from exc
    try:
        return fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    except ImportError as exc:
        package = PROTOCOL_PACKAGES.get(protocol or "", f"the fsspec implementation of {protocol}://")
        extra = " (it comes with honestci[distributed])" if package == "s3fs" else ""
        raise InputError(
            f"{url}: the {protocol}:// protocol needs {package}, which is not installed ({exc})",
            fix=f"pip install {package}{extra}",
        ) from exc
    except ValueError as exc:  # fsspec: "Protocol not known"
        raise InputError(
            f"{url}: {exc}", fix="use a local path or an fsspec URL (s3://, gs://, hf://, file://, ...)"
        ) from exc
    except TypeError as exc:  # an option the filesystem does not take
        raise InputError(
            f"{url}: storage options rejected by the {protocol}:// filesystem ({exc})",
            fix="check --storage-option KEY=VALUE against the filesystem's keyword arguments",
        ) from exc


def is_url(path: str | os.PathLike) -> bool:
    """True for an fsspec URL other than ``file://`` (which is read as a local path)."""
    return _protocol(os.fspath(path)) is not None


def corpus_name(path: str | os.PathLike) -> str:
    """The file name of a path or URL (``s3://b/dir/x.jsonl`` → ``x.jsonl``)."""
    return os.fspath(path).rstrip("/").rsplit("/", 1)[-1]


def expand_corpus(paths: Iterable[str | os.PathLike] | str | os.PathLike, storage_options=None) -> list[str]:
    """Paths and URLs with globs (``*``, ``?``, ``[``) expanded, each glob's matches sorted.

    A glob that matches nothing is an InputError; other paths are returned as given (a missing
    file is reported when it is sized or opened).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files: list[str] = []
    for path in (os.fspath(p) for p in paths):
        if not _GLOB_CHARS & set(path):
            files.append(path)
            continue
        if is_url(path):
            fs, inner = _filesystem(path, storage_options)
            found = fs.glob(inner, detail=True)  # one listing, no request per match
            matches = [fs.unstrip_protocol(m) for m, info in sorted(found.items()) if info.get("type") == "file"]
        else:
            matches = sorted(m for m in _glob.glob(_local(path)) if Path(m).is_file())
        if not matches:
            raise InputError(f"{path}: no corpus file matches this pattern", fix="check the glob")
        files += matches
    return files


def corpus_size(path: str | os.PathLike, storage_options=None) -> int:
    """Size in bytes (fsspec ``info`` for a URL); a missing file is an InputError."""
    url = os.fspath(path)
    try:
        if not is_url(url):
            local = Path(_local(url))
            if not local.is_file():
                raise FileNotFoundError(url)
            return local.stat().st_size
        fs, inner = _filesystem(url, storage_options)
        info = fs.info(inner)
        if info.get("type") == "directory":
            raise FileNotFoundError(url)
        return int(info["size"])
    except FileNotFoundError as exc:
        raise InputError(
            f"{url}: corpus file not found", fix="pass existing JSONL, Parquet or text files (paths or URLs)"
        ) from exc


#: Read-ahead of a URL opened for sequential reading (JSONL/text blocks of ~4 MB). s3fs's default
#: is 50 MiB: reading 64 MiB in 4 MiB blocks fetched 95 MiB from a local S3 server, 72 MiB with this.
READAHEAD_BYTES = 8 << 20


def open_corpus(path: str | os.PathLike, storage_options=None, *, sequential: bool = True) -> IO[bytes]:
    """A seekable binary handle on a corpus file (built-in ``open`` for local paths, fsspec for URLs).

    A URL read ``sequential``-ly (lines) gets an 8 MiB read-ahead; otherwise (Parquet, whose reader
    asks for whole column chunks and the footer) no cache, so each read is one ranged request.
    """
    url = os.fspath(path)
    try:
        if not is_url(url):
            return open(_local(url), "rb")  # the caller closes it
        fs, inner = _filesystem(url, storage_options)
        if sequential:
            return fs.open(inner, "rb", block_size=READAHEAD_BYTES, cache_type="readahead")
        return fs.open(inner, "rb", cache_type="none")
    except (FileNotFoundError, IsADirectoryError) as exc:
        raise InputError(
            f"{url}: corpus file not found", fix="pass existing JSONL, Parquet or text files (paths or URLs)"
        ) from exc


def parse_storage_options(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs → fsspec storage options; a dotted key nests (``client_kwargs.region_name=eu-west-1``).

    A value that parses as JSON is taken as such (``anon=true`` → True, ``max_concurrency=4`` → 4,
    ``config_kwargs={"connect_timeout": 5}`` → a dict); anything else is a string.
    """
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--storage-option {pair!r} is not KEY=VALUE", fix="e.g. endpoint_url=http://host:9000")
        try:
            parsed: Any = json.loads(value)
        except ValueError:
            parsed = value
        *parents, leaf = key.strip().split(".")
        node = options
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise InputError(f"--storage-option {pair!r}: {part} is already a value", fix="give it once")
            node = child
        node[leaf] = parsed
    return options
