"""Running the app: uvicorn with a drain. The first SIGTERM/SIGINT stops admitting (503), lets
the accepted requests finish within the grace period, then exits; a second SIGINT exits at once.
An engine failure ends the server with a non-zero status."""

from __future__ import annotations

import threading
import time

import uvicorn

from specjax.serve.engine import Engine


class Server(uvicorn.Server):
    """The HTTP server of ``app`` (from :func:`~specjax.serve.app.create_app`) over ``engine``.

    :meth:`run` serves on the calling thread (the main thread: signals drain);
    :meth:`start` on a thread of its own (tests), :meth:`drain` stopping it.
    """

    def __init__(self, app, engine: Engine, host: str, port: int, grace_seconds: float):
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
        super().__init__(config)
        self.app, self.engine, self.grace = app, engine, grace_seconds
        self.exit_code = 0
        self._draining = False
        engine.on_failure = self._engine_failed

    def handle_exit(self, sig, frame) -> None:
        if self._draining:
            super().handle_exit(sig, frame)  # a second signal: uvicorn's own (SIGINT: at once)
        else:
            self.drain()

    def drain(self) -> None:
        """Stops admitting; ends the server once the accepted requests are done (or the grace
        period is over: the rest fail with 503)."""
        self._draining = self.app.state.draining = True
        self.engine.stop()
        threading.Thread(target=self._finish, name="specjax-drain", daemon=True).start()

    def _finish(self) -> None:
        if not self.engine.join(self.grace):
            self.engine.abort(
                f"the server shut down before this request finished ({self.grace} s grace)"
            )
            self.engine.join(5.0)
        time.sleep(0.1)  # (the last events reach their responses)
        self.should_exit = True

    def _engine_failed(self, line: str) -> None:
        self.exit_code = 1
        self.should_exit = True

    def start(self, timeout: float = 60.0) -> Server:
        """Serves on a thread; returns once it listens."""
        self._thread = threading.Thread(target=self.run, name="specjax-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.02)
        return self

    @property
    def port(self) -> int:
        """The port it listens on (the one the OS chose for port 0)."""
        return self.servers[0].sockets[0].getsockname()[1]

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)
