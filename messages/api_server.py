"""What the daemon tells the actors that write to the API server on their own cadence
(the status manager, the mirror pod actor) when the API server answers again."""

from __future__ import annotations

import msgspec


class ApiServerAnswersAgain(msgspec.Struct, tag=True, tag_field="kind", frozen=True):
    """The API server answered a request after one got no answer (or a 5xx, or a 429):
    what an actor held back because of it, it may try now rather than after its back-off
    or period (ports/apiserver/reachability.py)."""


MirrorPodsMessage = ApiServerAnswersAgain
