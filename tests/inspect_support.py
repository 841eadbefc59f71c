"""Test helper: rewrite a real inspect_ai ``.eval`` log with edited members (for malformed-input tests)."""

import json
import zipfile
from pathlib import Path

from honestci.judges.importers_inspect import _zip_member


def rewrite_eval(src: Path, dst: Path, edits=None, compression=zipfile.ZIP_DEFLATED) -> Path:
    """Copy an .eval log member by member (read by honestci's own reader), ``edits[name](json)``
    applied, written with the stdlib's ``compression`` (deflate: what inspect_ai wrote before zstd)."""
    edits = edits or {}
    with zipfile.ZipFile(src) as archive, zipfile.ZipFile(dst, "w", compression=compression) as out:
        for info in archive.infolist():
            data = _zip_member(src, archive, info)
            if info.filename in edits:
                data = json.dumps(edits[info.filename](json.loads(data))).encode()
            out.writestr(info.filename, data)
    return dst
