"""The server the app talks to, kept alive: OLLAMA_HOST's (checked once, never started here), or the
embedded server this app started, started again whenever it is found dead (killed, crashed, out of
memory), on the same port so every cached client and setting stays valid.

One `AppServer` per process (runtime.py caches it); every script run asks it for the URL, which costs a
`poll()` of the child process, so a dead server is noticed and replaced before the page asks it anything.
"""

from __future__ import annotations

import atexit
import signal
import subprocess
import threading
from dataclasses import dataclass
from datetime import datetime

from config import Settings
from utils.embedded.server import EmbeddedServer
from utils.embedded.store.models import ModelStore
from utils.hosts import HostError, target_host

START_TIMEOUT = 60.0  # seconds for the embedded server to answer after a (re)start


class EmbeddedServerDown(HostError):
    """The embedded server this app started is gone and could not be started again."""


@dataclass
class Restart:
    """One time the app found its embedded server dead and started it again."""

    at: datetime
    why: str  # how it ended, e.g. "killed by signal SIGKILL"
    ok: bool  # False: starting it again failed too (see `AppServer.failure`)


def ended(code: int | None) -> str:
    """How a process ended, in words, from its return code."""
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class AppServer:
    """The server in use for this app process (see the module's docstring)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.embedded: EmbeddedServer | None = None
        self.restarts: list[Restart] = []
        self.failure: str | None = None  # why the last (re)start failed, until one succeeds
        self._checked_host: str | None = None
        self._lock = threading.Lock()  # two sessions' runs must not both restart it
        self.log_path = settings.data_dir / "logs" / "embedded-server.log"

    @property
    def owns_server(self) -> bool:
        """True when the server is the embedded one this app starts (no OLLAMA_HOST)."""
        return not self.settings.ollama_host

    @property
    def pid(self) -> int | None:
        process = self.embedded.process if self.embedded else None
        return process.pid if process is not None and process.poll() is None else None

    def url(self) -> str:
        """The server's URL, starting the embedded server if it is not running (first use, or it died);
        raises HostError with what to do when there is none."""
        if not self.owns_server:
            if self._checked_host is None:
                self._checked_host = target_host(self.settings)  # HostError: says to start it or fix OLLAMA_HOST
            return self._checked_host
        with self._lock:
            if self.embedded is None:
                return self._start_first().url
            process = self.embedded.process
            if process is None or process.poll() is not None:
                return self._restart(ended(process.returncode if process else None)).url
            return self.embedded.url

    def restart(self) -> str:
        """Stop the embedded server if it runs and start it again (the sidebar's Restart button)."""
        with self._lock:
            if self.embedded is None:
                return self._start_first().url
            self.embedded.stop()
            return self._restart("was restarted from the sidebar").url

    def revive(self) -> str | None:
        """After a failed answer: if the embedded server had died, start it again now and say so (a
        sentence for the answer's note); None when it is running, or is not ours to start."""
        if not self.owns_server or self.embedded is None or self.embedded.process is None:
            return None
        try:  # the connection breaks as the process dies: give it a moment to be reaped
            self.embedded.process.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            return None  # it runs: the failure was something else
        try:
            self.url()
        except HostError as error:
            message = str(error)
            return f"{message[:1].upper()}{message[1:]}. Press Restart in the sidebar to try again."
        last = self.restarts[-1]
        return (f"The embedded server this app started {last.why} while answering; the app started it again, "
                "so ask again or regenerate the answer.")

    def _start_first(self) -> EmbeddedServer:
        """Start the embedded server the first time; it is `self.embedded` from then on."""
        if not ModelStore(self.settings.models_dir).installed():
            raise HostError("no OLLAMA_HOST and no bundled model installed: run `python cli.py models install`")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.embedded = server = self._launch(self._server())
        atexit.register(self._stop_at_exit)
        return server

    def _stop_at_exit(self) -> None:
        if self.embedded is not None:
            self.embedded.stop()

    def _restart(self, why: str) -> EmbeddedServer:
        """Start it again on its port (clients and caches keyed by the URL stay valid); on a fresh port
        if that port was taken meanwhile. The new server is `self.embedded` and is returned."""
        assert self.embedded is not None
        port = self.embedded.port
        try:
            server = self._launch(self._server(port))
        except HostError:
            try:
                server = self._launch(self._server())
            except HostError as error:
                self.restarts.append(Restart(datetime.now(), why, ok=False))
                raise EmbeddedServerDown(f"the embedded server this app started {why}, and starting it again "
                                         f"failed: {error}") from None
        self.embedded = server
        self.restarts.append(Restart(datetime.now(), why, ok=True))
        return server

    def _server(self, port: int | None = None) -> EmbeddedServer:
        """`cli.py serve` with speculation on: the app's answers are made by the engine in it."""
        return EmbeddedServer(port=port, log_path=self.log_path, speculation=True)

    def _launch(self, server: EmbeddedServer) -> EmbeddedServer:
        try:
            server.start(START_TIMEOUT)
        except RuntimeError as error:
            self.failure = f"{error} (its log: {self.log_path})"
            raise HostError(self.failure) from None
        self.failure = None
        return server
