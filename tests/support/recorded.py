"""A stand-in for Ollama, named as such: it replays bodies recorded from a real Ollama 0.32.15
(tests/data/ollama-recorded/, copied from the recordings and described in their README.md). It is used
because a real Ollama cannot run in this suite; what the embedded server answers to the same requests
is checked against the same recordings in tests/test_recorded_conformance.py.

    with RecordedOllama() as ollama:            # 127.0.0.1, a free port, a background thread
        client = OllamaClient(ollama.url)
        ...
        ollama.received                         # every request it got, in order (Received)
        ollama.bodies("/api/generate")          # the JSON bodies sent to one path

`RecordedOllama(only=["20"])` serves only the exchanges whose names start with one of those prefixes
(here /api/ps with the 8192 context instead of 14's 4096).

The matching rule, for each request:

1. The method and path must be the recorded exchange's (the path without its query string; the
   recordings do not store paths, EXCHANGES below says which file was which request).
2. GET (and HEAD): nothing else is compared.
3. POST: the fields that say *what was asked* must be equal in the request's JSON body and the
   recorded one (IDENTIFYING): `model`, `prompt`, `messages`, `stream` (absent counts as true on
   /api/*, as Ollama reads it, and as false on /v1/*), `think` (absent counts as false: a model
   without thinking answers both alike), `verbose` and `_debug_render_only` (absent is false),
   `max_tokens`, and in `options` `num_predict` and `num_ctx`. Everything else (`logprobs`,
   `top_logprobs`, `raw`, `truncate`, `keep_alive`, `format`, other options, headers) is not
   required to agree, because clients add such fields of their own.
4. Among the recordings that pass 3, the one that agrees with the request on the most of the other
   top-level fields and options wins (a request with `logprobs: true` gets 05, not the warm-up 04
   that has no `logprobs`); recordings equal on that too are served in turn, in recorded order (the
   first of five concurrent prompts gets 11-nested-0, the same prompt again 12-sequential-0; a
   second GET /api/ps gets 20 after 14).
5. No recording passes: status 599, `{"error": "no recorded exchange for POST /api/... {body}"}`,
   so that a failing test shows what was asked. The request is still in `received`.

A match answers the recorded status, Content-Type and body bytes: with Content-Length, or chunked
where Ollama sent it chunked; an NDJSON body (application/x-ndjson) one line per chunk, flushed line
by line; an event stream (text/event-stream: 29-36's /v1/messages and /v1/responses) in one piece.
Left out of the copy: 03's verbose show (the whole vocabulary, 1.4 MB gzipped).
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RECORDED = Path(__file__).resolve().parents[1] / "data" / "ollama-recorded"
UNMATCHED = 599

# Which request each recorded file answered (by its number; the files keep only bodies). 21 is named
# "chat" but its body is a generate body (a `prompt`, no `messages`): Ollama read it at /api/generate.
EXCHANGES: dict[str, tuple[str, str]] = {
    "01": ("GET", "/api/version"), "02": ("GET", "/api/tags"), "03": ("POST", "/api/show"),
    "04": ("POST", "/api/generate"), "05": ("POST", "/api/generate"), "06": ("POST", "/api/generate"),
    "07": ("POST", "/api/generate"), "08": ("POST", "/api/chat"), "09": ("POST", "/api/chat"),
    "10": ("POST", "/api/generate"), "11": ("POST", "/api/generate"), "12": ("POST", "/api/generate"),
    "13": ("POST", "/v1/chat/completions"), "14": ("GET", "/api/ps"), "15": ("POST", "/api/generate"),
    "16": ("POST", "/api/generate"), "17": ("POST", "/api/generate"), "18": ("POST", "/api/show"),
    "19": ("POST", "/api/chat"), "20": ("GET", "/api/ps"), "21": ("POST", "/api/generate"),
    **{f"{n}": ("POST", "/api/chat") for n in range(22, 27)}, "27": ("POST", "/v1/chat/completions"),
    "28": ("POST", "/v1/chat/completions"), **{f"{n}": ("POST", "/v1/messages") for n in range(29, 33)},
    **{f"{n}": ("POST", "/v1/responses") for n in range(33, 37)},
    # 37-49 and 50-62: the stand-in thinking model with a Jinja and with a Go template, the same requests.
    **{f"{first + n}": (method, path) for first in (37, 50) for n, (method, path) in enumerate(
        [("POST", "/api/show")] + [("POST", "/api/chat")] * 7 + [("POST", "/api/generate")] * 2
        + [("POST", "/v1/chat/completions")] * 2 + [("POST", "/api/chat")])},
    **{f"{n}": ("POST", "/api/generate") for n in range(63, 68)}, "68": ("POST", "/api/chat"),
    "69": ("POST", "/api/chat"), "70": ("POST", "/v1/chat/completions"), "71": ("POST", "/api/show"),
}
# Served only when `only` names them: 71 is a second /api/show of qwen2.5-coder:1.5b (created with the
# Ollama library's TEMPLATE and SYSTEM), so that the same request gets 03 (the GGUF imported) by default.
ASKED_ONLY = ("71",)
IDENTIFYING = ("model", "prompt", "messages", "stream", "think", "verbose", "_debug_render_only", "max_tokens")
IDENTIFYING_OPTIONS = ("num_predict", "num_ctx")


@dataclass
class Exchange:
    """One recorded request and Ollama's answer to it."""

    name: str
    method: str
    path: str
    request: dict[str, Any] | None
    status: int
    content_type: str
    chunked: bool
    body: bytes

    def json(self) -> Any:
        """The recorded answer as JSON (a list of messages for NDJSON, of events for an event stream)."""
        if self.content_type.startswith("application/x-ndjson"):
            return [json.loads(line) for line in self.body.splitlines() if line.strip()]
        if self.content_type.startswith("text/event-stream"):
            return sse_events(self.body.decode())
        return json.loads(self.body)


@dataclass
class Received:
    """One request the replay server got, and the name of the exchange that answered it (None: 599)."""

    method: str
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes
    matched: str | None

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


def _read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


def load(name: str) -> Exchange:
    """The recorded exchange `name` (a file name without its suffix, e.g. "05-generate-raw-logprobs")."""
    method, path = EXCHANGES[name[:2]]
    request = _read(RECORDED / f"{name}.request.json")
    status = _read(RECORDED / f"{name}.status.txt")
    headers = _read(RECORDED / f"{name}.headers.txt") or ""
    content_type = re.search(r"(?im)^content-type:\s*(.+?)\s*$", headers)
    return Exchange(
        name, method, path, json.loads(request) if request else None,
        int(status.split()[0]) if status else 200,  # 20 has no status file: a 200 like 14
        content_type.group(1) if content_type else "application/json; charset=utf-8",
        bool(re.search(r"(?im)^transfer-encoding:\s*chunked", headers)),
        (RECORDED / f"{name}.response").read_bytes(),
    )


def sse_events(text: str) -> list[dict[str, Any]]:
    """Server-sent events (`event: NAME` and `data: JSON` lines, a blank line after each) as
    {"event": NAME, "data": the JSON}, in order."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in fields:
            events.append({"event": fields.get("event", "message"), "data": json.loads(fields["data"])})
    return events


def names() -> list[str]:
    """Every recorded exchange, in recorded order."""
    return sorted(path.name.removesuffix(".response") for path in RECORDED.glob("*.response"))


def _identity(path: str, body: dict[str, Any]) -> tuple:
    options = body.get("options") or {}
    defaults = {"stream": not path.startswith("/v1/"), "think": False, "verbose": False,
                "_debug_render_only": False}
    values = [body.get(key) for key in IDENTIFYING]
    top = tuple(json.dumps(defaults.get(key) if value is None else value, sort_keys=True)
                for key, value in zip(IDENTIFYING, values))
    return top + tuple(options.get(key) for key in IDENTIFYING_OPTIONS)


def _agreement(request: dict[str, Any], recorded: dict[str, Any]) -> int:
    """How many of the other top-level fields and options the two bodies share with equal values."""
    def flat(body: dict[str, Any]) -> dict[str, str]:
        fields = {k: json.dumps(v, sort_keys=True) for k, v in body.items() if k != "options"}
        return fields | {f"options.{k}": json.dumps(v) for k, v in (body.get("options") or {}).items()}
    mine, theirs = flat(request), flat(recorded)
    return sum(1 for key, value in theirs.items() if mine.get(key) == value)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *_: object) -> None:  # quiet: tests read `received` instead
        pass

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, True)

    def finish(self) -> None:
        self.server.track(self.connection, False)
        super().finish()

    def _body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            data = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                data += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
            return data
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _answer(self) -> None:
        body = self._body()
        path = self.path.split("?")[0]
        exchange = self.server.replay.match(self.command, path, body)
        self.server.replay.note(Received(self.command, path, {k.lower(): v for k, v in self.headers.items()},
                                         body, exchange.name if exchange else None))
        if exchange is None:
            text = body.decode(errors="replace")
            self._send(UNMATCHED, "application/json; charset=utf-8", False,
                       json.dumps({"error": f"no recorded exchange for {self.command} {path} {text}"}).encode())
        else:
            self._send(exchange.status, exchange.content_type, exchange.chunked, exchange.body)

    def _send(self, status: int, content_type: str, chunked: bool, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if not chunked or self.command == "HEAD":
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        lines = body.splitlines(keepends=True) if content_type.startswith("application/x-ndjson") else [body]
        for line in lines:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    do_GET = do_POST = do_HEAD = do_DELETE = _answer


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close() waits for every connection's thread
    block_on_close = True

    def __init__(self, replay: RecordedOllama):
        self.replay = replay
        self.open: set[socket.socket] = set()
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def track(self, connection: socket.socket, alive: bool) -> None:
        with self.lock:
            (self.open.add if alive else self.open.discard)(connection)

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hung up mid-answer (a stream left early) is no error; anything else is."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def hang_up(self) -> None:
        """Closes the kept-alive connections, so that their threads end."""
        with self.lock:
            for connection in self.open:
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class RecordedOllama:
    """The replay server. `only`: prefixes of the exchanges to serve (default: all of them)."""

    def __init__(self, only: list[str] | None = None):
        chosen = [n for n in names() if any(n.startswith(prefix) for prefix in only)] if only is not None \
            else [n for n in names() if not n.startswith(ASKED_ONLY)]
        self.exchanges = [load(name) for name in chosen]
        self.served: dict[str, int] = {}
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    def match(self, method: str, path: str, body: bytes) -> Exchange | None:
        """The exchange that answers this request (the module's docstring has the rule), or None."""
        candidates = [e for e in self.exchanges if e.method == ("GET" if method == "HEAD" else method)
                      and e.path == path]
        if method == "POST":
            try:
                request = json.loads(body) if body else {}
            except ValueError:
                return None
            if not isinstance(request, dict):
                return None
            key = _identity(path, request)
            candidates = [e for e in candidates if e.request is not None and _identity(path, e.request) == key]
            if candidates:
                best = max(_agreement(request, e.request or {}) for e in candidates)
                candidates = [e for e in candidates if _agreement(request, e.request or {}) == best]
        if not candidates:
            return None
        with self._lock:  # equal ones in turn: the one served least so far, the earliest first
            chosen = min(candidates, key=lambda e: self.served.get(e.name, 0))
            self.served[chosen.name] = self.served.get(chosen.name, 0) + 1
        return chosen

    def note(self, received: Received) -> None:
        with self._lock:
            self.received.append(received)

    def bodies(self, path: str) -> list[Any]:
        """The JSON bodies of the requests received at `path`, in order."""
        with self._lock:
            return [r.json() for r in self.received if r.path == path]

    def start(self) -> RecordedOllama:
        self._server = _Server(self)
        host, port = self._server.server_address[:2]
        self.url = f"http://{host}:{port}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="recorded-ollama", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops accepting, hangs up kept-alive connections and waits for every thread to end."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.hang_up()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None

    def __enter__(self) -> RecordedOllama:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def kind(value: Any) -> str:
    """A JSON value's type: null, bool, int, float, str, list or dict."""
    if value is None:
        return "null"
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list"}.get(type(value), "dict")


def _merged(one: Any, other: Any) -> Any:
    """Two recorded values as one template: objects' fields and lists' elements together."""
    if isinstance(one, dict) and isinstance(other, dict):
        return {**other, **{k: _merged(v, other[k]) if k in other else v for k, v in one.items()}}
    if isinstance(one, list) and isinstance(other, list):
        return one + other
    return one


def shape_differences(expected: Any, got: Any, where: str = "", ignore: tuple[str, ...] = ()) -> list[str]:
    """Where `got` has other field names or JSON types than `expected`, as sorted lines
    `path: expected X, got Y` (`.a.b`, `[]` for any element of a list). A float may come as an int
    (Go writes 0.0 as 0), not the other way. In a list of objects, a field in every recorded element is
    required and one in some of them allowed; paths in `ignore` are not looked into."""
    if where in ignore:
        return []
    want, have = kind(expected), kind(got)
    if want != have and not (want == "float" and have == "int"):
        return [f"{where or '.'}: expected {want}, got {have}"]
    found: list[str] = []
    if want == "dict":
        for key, value in expected.items():
            if key in got:
                found += shape_differences(value, got[key], f"{where}.{key}", ignore)
            else:
                found.append(f"{where}.{key}: expected {kind(value)}, got nothing")
        found += [f"{where}.{key}: expected nothing, got {kind(got[key])}" for key in got if key not in expected]
    elif want == "list" and expected and got:
        if all(isinstance(item, dict) for item in expected):
            required = set.intersection(*(set(item) for item in expected))
            template: dict[str, Any] = {}
            for item in expected:
                template = _merged(template, item)
            for item in got:
                allowed = {k: v for k, v in template.items() if k in required or isinstance(item, dict) and k in item}
                found += shape_differences(allowed, item, f"{where}[]", ignore)
        else:
            for i, item in enumerate(got):
                found += shape_differences(expected[min(i, len(expected) - 1)], item, f"{where}[]", ignore)
    return sorted(set(found))
