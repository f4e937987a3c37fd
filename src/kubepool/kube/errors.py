"""kubepool's API error vocabulary. Raw client exceptions never leave kubepool.kube: callers see these,
each with a message that says what to do."""

from __future__ import annotations

from lightkube import ApiError


class KubeError(Exception):
    """An API call failed; `status` is the HTTP code (0 when the server was not reached)."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    pass


class Forbidden(KubeError):
    pass


class Invalid(KubeError):
    """The API server refused the object (schema or CEL rule); the message is the server's."""


class Unreachable(KubeError):
    pass


def status_error(code: int, message: str, reason: str = "", what: str = "") -> KubeError:
    """The KubeError for an API server's answer `code` with its Status message and reason."""
    prefix = f"{what}: " if what else ""
    cls = {404: NotFound, 409: Conflict, 403: Forbidden, 422: Invalid}.get(code, KubeError)
    if code == 403:
        message += " (ask a cluster admin for a Role that allows it)"
    return cls(prefix + message, code, reason)


def translate(err: Exception, what: str = "") -> KubeError:
    """Map a lightkube/httpx error to ours, keeping the server's message."""
    if isinstance(err, ApiError):
        return status_error(err.status.code or 0, err.status.message or str(err), err.status.reason or "", what)
    return Unreachable(f"{what + ': ' if what else ''}cannot reach the Kubernetes API ({err}); is the cluster up and KUBECONFIG set?")
