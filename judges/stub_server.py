"""A local OpenAI-compatible chat-completions server for tests, benchmarks and dry runs.

It speaks ``POST /v1/chat/completions`` over real HTTP on 127.0.0.1, answers like a deterministic
judge, and can inject the faults a real judge server produces: timeouts (it stalls), HTTP 429
(with ``Retry-After``), HTTP 500, garbage bodies (not JSON, or JSON without ``choices``) and
unparseable verdict text. Every request is logged with the ordered pair it asked about.

The judge's taste: response ids are found in the user message with ``id_pattern`` (in order of
appearance: first, second); it prefers the id with the larger ``int(id) % 7`` and calls equal
values a tie, so tests know every correct verdict in advance.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from dataclasses import dataclass, field
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
                payload = json.loads(self.rfile.read(length) or b"{}")
                server.authorizations.add(self.headers.get("Authorization"))
                if self.path != "/v1/chat/completions":
                    self._send(404, b'{"error": "not found"}')
                    return
                user = " ".join(m.get("content", "") for m in payload.get("messages", []) if m.get("role") == "user")
                ids = server._pattern.findall(user)
                pair = (ids[0], ids[1]) if len(ids) >= 2 else (None, None)
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
                    content: str | None
                    if outcome == "null_content":
                        content = None  # a refusal or a filtered generation: a reply with no text
                    elif outcome == "unparseable" or pair[0] is None:
                        content = "I'm not able to compare these."
                    else:
                        verdict = preferred_position(*pair)
                        token = {"first": "[[A]]", "second": "[[B]]", "tie": "[[C]]"}[verdict]
                        content = f"Both are reasonable; weighing empathy and realism.\n\nFinal verdict: {token}"
                    body = {
                        "id": "chatcmpl-stub",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": payload.get("model"),
                        "choices": [
                            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
                        ],
                        "usage": {"prompt_tokens": len(user) // 4, "completion_tokens": 12},
                    }
                    self._send(200, json.dumps(body).encode())

        return Handler


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
