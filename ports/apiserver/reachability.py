"""Whether the API server answers, as the clients of one server see it: each client
reports every request's outcome here, and the first answer after a request that got
none (or a 5xx, or a 429) calls `on_answers_again`, so that the daemon can tell the actors
that wait for a period or a back-off after a failed request to try again now.
"""

from __future__ import annotations

from collections.abc import Callable


class ApiReachability:
    """Shared by the ApiClients of one API server (the main, heartbeat and event clients).

    `answering` is False from a request that got no answer, or an answer that says the
    server cannot serve (5xx, 429), to the next answer of any other kind; that answer
    calls on_answers_again once. Requests overlap, so a slow request may fail after a
    later one was answered: that starts a new failure, and the next answer reports again.
    """

    def __init__(self, on_answers_again: Callable[[], None] | None = None) -> None:
        self.on_answers_again = on_answers_again
        self.answering = True

    def failed(self) -> None:
        self.answering = False

    def answered(self, status: int) -> None:
        """An HTTP answer with this status code."""
        if status >= 500 or status == 429:
            self.failed()
            return
        if not self.answering:
            self.answering = True
            if self.on_answers_again is not None:
                self.on_answers_again()
