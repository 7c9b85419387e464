"""Generic supervision: child specs, supervisors with OTP strategies, named mailboxes.

Knows nothing of Kubernetes. See docs/architecture.md for the rules of the tree.
"""

from .child import ActorContext
from .errors import InjectedCrash, NotRunning, RestartIntensityExceeded, SupervisorError
from .mailbox import Mailbox, MailboxError, MailboxFull, MailboxSpec, MailboxTimeout, Registry, UnknownAddress
from .record import ActorRecord
from .spec import NO_BACKOFF, ChildSpec, Restart, RestartBackoff, RestartIntensity
from .supervisor import Supervisor

__all__ = [
    "ActorContext",
    "ActorRecord",
    "ChildSpec",
    "InjectedCrash",
    "Mailbox",
    "MailboxError",
    "MailboxFull",
    "MailboxSpec",
    "MailboxTimeout",
    "NO_BACKOFF",
    "NotRunning",
    "Registry",
    "Restart",
    "RestartBackoff",
    "RestartIntensity",
    "RestartIntensityExceeded",
    "Supervisor",
    "SupervisorError",
    "UnknownAddress",
]
