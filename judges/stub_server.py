"""A local OpenAI-compatible chat-completions server for tests, benchmarks and dry runs.

It speaks ``POST /v1/chat/completions`` over real HTTP on 127.0.0.1, answers like a deterministic
judge, and can inject the faults a real judge server produces: timeouts (it stalls), HTTP 429
(with ``Retry-After``), HTTP 500, garbage bodies (not JSON, or JSON without ``choices``) and
unparseable verdict text. Every request is logged with the ordered pair it asked about. A minimal
OpenAI Batch API (``POST /v1/files``, ``POST /v1/batches``, ``GET /v1/batches/{id}``,
``GET /v1/files/{id}/content``) runs a batch synchronously when it is created, with the same
judge and fault draws (a fault other than an unparseable or null reply becomes a 500 result line).

The judge's taste: response ids are found in the user message with ``id_pattern`` (in order of
appearance: first, second); it prefers the id with the larger ``int(id) % 7`` and calls equal
values a tie, so tests know every correct verdict in advance.
"""

from __future__ import annotations

import email.policy
import json
import random
import re
import threading
import time
from dataclasses import dataclass, field
from email.parser import BytesParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FAULTS = ("timeout", "429", "500", "garbage", "garbage_json", "unparseable", "null_content")


def preferred_position(first_id: str, second_id: str) -> str:
    """The stub judge's verdict for an ordered pair of numeric ids: ``first``, ``second`` or ``tie``."""
    a, b = int(first_id) % 7, int(second_id) % 7
    return "first" if a > b else "second" if b > a else "tie"


@dataclass
class StubConfig:
    """Behaviour of the stub. Fault probabilities apply per request (seeded)."""

    latency_s: float = 0.0
    stall_s: float = 2.0
    fault_rates: dict = field(default_factory=dict)
    always_fail_pairs: frozenset = frozenset()
    id_pattern: str = r"RID-(\d+)"
    seed: int = 0
    scripted: tuple = ()  # outcomes of the first requests, in arrival order (then the random draws)


@dataclass(frozen=True)
class LoggedRequest:
    time: float
    first: str | None
    second: str | None
    outcome: str


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # the default listen backlog (5) drops connects under concurrency 32

    def handle_error(self, request, client_address) -> None:
        """A client that hung up (timed out, or was killed) is expected here, not an error."""
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class StubJudgeServer:
    """Run with ``with StubJudgeServer(config) as server: server.base_url``."""

    def __init__(self, config: StubConfig | None = None, port: int = 0):
        self.config = config or StubConfig()
        self.log: list[LoggedRequest] = []
        self.authorizations: set[str | None] = set()
        self.files: dict[str, bytes] = {}  # the Batch API's /v1/files
        self.batches: dict[str, dict] = {}  # /v1/batches, each completed when created
        self._lock = threading.Lock()
        self._rng = random.Random(self.config.seed)
        self._scripted = list(self.config.scripted)
        self._pattern = re.compile(self.config.id_pattern)
        self._httpd = _Server(("127.0.0.1", port), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> StubJudgeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _choose_outcome(self, pair) -> str:
        if pair in self.config.always_fail_pairs:
            return "500"
        with self._lock:
            if self._scripted:
                return self._scripted.pop(0)
            draw = self._rng.random()
        cumulative = 0.0
        for fault in FAULTS:
            cumulative += self.config.fault_rates.get(fault, 0.0)
            if draw < cumulative:
                return fault
        return "ok"

    def _handler_class(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in separate writes

            def log_message(self, *args) -> None:  # keep test output clean
                return None

            def _send(self, status: int, body: bytes, content_type: str = "application/json", headers=None):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                server.authorizations.add(self.headers.get("Authorization"))
                if self.path == "/v1/files":
                    self._send(200, json.dumps(server.upload(self.headers["Content-Type"], raw)).encode())
                    return
                payload = json.loads(raw or b"{}")
                if self.path == "/v1/batches":
                    self._send(200, json.dumps(server.create_batch(payload)).encode())
                    return
                if self.path != "/v1/chat/completions":
                    self._send(404, b'{"error": "not found"}')
                    return
                pair = server._pair(payload)
                outcome = server._choose_outcome(pair)
                with server._lock:
                    server.log.append(LoggedRequest(time.time(), pair[0], pair[1], outcome))
                if outcome == "timeout":
                    time.sleep(server.config.stall_s)
                    try:
                        self._send(500, b'{"error": "too late"}')
                    except OSError:
                        pass  # the client gave up long ago
                    return
                time.sleep(server.config.latency_s)
                if outcome == "429":
                    self._send(429, b'{"error": "rate limited"}', headers={"Retry-After": "0"})
                elif outcome == "500":
                    self._send(500, b'{"error": "internal"}')
                elif outcome == "garbage":
                    self._send(200, b"<html>upstream proxy error</html>", "text/html")
                elif outcome == "garbage_json":
                    self._send(200, b'{"object": "error", "message": "overloaded"}')
                else:
                    self._send(200, json.dumps(server._completion_body(payload, pair, outcome)).encode())

            def do_GET(self) -> None:
                server.authorizations.add(self.headers.get("Authorization"))
                parts = self.path.strip("/").split("/")
                with server._lock:
                    if parts[:2] == ["v1", "batches"] and len(parts) == 3:
                        found = server.batches.get(parts[2])
                        body = None if found is None else json.dumps(found).encode()
                    elif parts[:2] == ["v1", "files"] and len(parts) == 4 and parts[3] == "content":
                        body = server.files.get(parts[2])
                    else:
                        body = None
                if body is not None:
                    self._send(200, body)
                    return
                self._send(404, b'{"error": "not found"}')

        return Handler

    def _completion_body(self, payload: dict, pair: tuple, outcome: str) -> dict:
        """The chat completion the stub judge answers (``ok``, ``unparseable`` or ``null_content``)."""
        user = " ".join(m.get("content", "") for m in payload.get("messages", []) if m.get("role") == "user")
        content: str | None
        if outcome == "null_content":
            content = None  # a refusal or a filtered generation: a reply with no text
        elif outcome == "unparseable" or pair[0] is None:
            content = "I'm not able to compare these."
        else:
            verdict = preferred_position(*pair)
            token = {"first": "[[A]]", "second": "[[B]]", "tie": "[[C]]"}[verdict]
            content = f"Both are reasonable; weighing empathy and realism.\n\nFinal verdict: {token}"
        return {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": payload.get("model"),
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": len(user) // 4, "completion_tokens": 12},
        }

    def _pair(self, payload: dict) -> tuple:
        user = " ".join(m.get("content", "") for m in payload.get("messages", []) if m.get("role") == "user")
        ids = self._pattern.findall(user)
        return (ids[0], ids[1]) if len(ids) >= 2 else (None, None)

    def upload(self, content_type: str, body: bytes) -> dict:
        """``POST /v1/files`` (multipart, purpose ``batch``): store the ``file`` part."""
        message = BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + body
        )
        parts = {part.get_param("name", header="content-disposition"): part for part in message.iter_parts()}
        data = parts["file"].get_payload(decode=True)
        assert isinstance(data, bytes)  # a decoded leaf part
        with self._lock:
            file_id = f"file-{len(self.files)}"
            self.files[file_id] = data
        return {"id": file_id, "object": "file", "bytes": len(data), "purpose": "batch"}

    def create_batch(self, request: dict) -> dict:
        """``POST /v1/batches``: run every line of the input file at once (each with the usual fault draw)."""
        with self._lock:
            lines = self.files[request["input_file_id"]].decode("utf-8").splitlines()
        out: list[dict] = []
        for line in filter(None, lines):
            item = json.loads(line)
            pair = self._pair(item["body"])
            outcome = self._choose_outcome(pair)
            with self._lock:
                self.log.append(LoggedRequest(time.time(), pair[0], pair[1], f"batch:{outcome}"))
            if outcome in ("ok", "unparseable", "null_content"):
                response = {"status_code": 200, "body": self._completion_body(item["body"], pair, outcome)}
            else:
                response = {"status_code": 500, "body": {"error": {"message": "internal"}}}
            out.append({"id": f"req-{len(out)}", "custom_id": item["custom_id"], "response": response, "error": None})
        with self._lock:
            output_id = f"file-{len(self.files)}"
            self.files[output_id] = "".join(json.dumps(row) + "\n" for row in out).encode()
            batch_id = f"batch-{len(self.batches)}"
            self.batches[batch_id] = {
                "id": batch_id,
                "object": "batch",
                "endpoint": request.get("endpoint"),
                "input_file_id": request["input_file_id"],
                "status": "completed",
                "output_file_id": output_id,
                "error_file_id": None,
                "request_counts": {"total": len(out), "completed": len(out), "failed": 0},
            }
            return self.batches[batch_id]


def write_stub_study(folder: str | Path, n_contests: int, n_vignettes: int = 5) -> dict[str, Path]:
    """Vignettes, responses and contests whose response texts carry ``RID-<n>`` markers.

    Contest ``i`` compares responses ``2i`` and ``2i + 1`` on vignette ``i % n_vignettes``.
    Returns the three paths (``vignettes``, ``responses``, ``contests``).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vignettes = [
        {"vignette_id": f"v{g}", "text": f"Scenario {g}: my friend cancelled on me again {{sigh}}."}
        for g in range(n_vignettes)
    ]
    responses, contests = [], []
    for i in range(n_contests):
        vid = f"v{i % n_vignettes}"
        for rid in (2 * i, 2 * i + 1):
            responses.append(
                {
                    "response_id": str(rid),
                    "vignette_id": vid,
                    "system": f"sys{rid % 2}",
                    "text": f"RID-{rid}: maybe they are overwhelmed; it says little about me.",
                }
            )
        contests.append({"vignette_id": vid, "response_a": str(2 * i), "response_b": str(2 * i + 1)})
    paths = {}
    for name, rows in (("vignettes", vignettes), ("responses", responses), ("contests", contests)):
        paths[name] = folder / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return paths


def main() -> None:  # pragma: no cover - manual dry runs
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--latency", type=float, default=0.05)
    args = parser.parse_args()
    with StubJudgeServer(StubConfig(latency_s=args.latency), port=args.port) as server:
        print(f"stub judge at {server.base_url} (Ctrl-C to stop)", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass  # Ctrl-C is the way to stop it


if __name__ == "__main__":
    main()
