"""kubepool's API error vocabulary. Raw client exceptions never leave kubepool.kube: callers see these,
each with a message that says what to do."""

from __future__ import annotations

# Answers that refuse the request itself (RBAC, a ResourceQuota, an admission policy, an invalid object): retrying
# cannot help until someone changes something, so the user must hear of them at once.
REFUSAL_CODES = (400, 403, 422)


class KubeError(Exception):
    """An API call failed; `status` is the HTTP code (0 when the server was not reached); `retry_after` the
    seconds the server asked the client to wait (429, some 5xx), if it said."""

    def __init__(self, message: str, status: int = 0, reason: str = "", retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after

    @property
    def refused(self) -> bool:
        return self.status in REFUSAL_CODES


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    pass


class Going(Conflict):
    """An object the operator would create is still there and on its way out (an earlier same-name job's child,
    which the garbage collector is removing): the write is tried again within seconds, not backed off for long."""


class Foreign(Conflict):
    """An object the operator would create exists and is not its to take (no owner it knows): someone must
    delete or rename it, so it is a refusal the user hears of at once."""

    @property
    def refused(self) -> bool:
        return True


class Forbidden(KubeError):
    pass


class Invalid(KubeError):
    """The API server refused the object (schema or CEL rule); the message is the server's."""


class Unreachable(KubeError):
    pass


def status_error(code: int, message: str, reason: str = "", what: str = "", retry_after: float | None = None) -> KubeError:
    """The KubeError for an API server's answer `code` with its Status message and reason."""
    prefix = f"{what}: " if what else ""
    cls = {404: NotFound, 409: Conflict, 403: Forbidden, 422: Invalid}.get(code, KubeError)
    if code == 403 and "exceeded quota" not in message:
        message += " (ask a cluster admin for a Role that allows it)"
    return cls(prefix + message, code, reason, retry_after)
