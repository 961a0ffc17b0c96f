"""The exceptions a Client raises, one class per meaning of a failure.

The coordinator answers with gRPC status codes, each used for one meaning
(INVALID_ARGUMENT: a bad spec or request, NOT_FOUND: an unknown job, ...).
from_rpc_error turns a failed call into the matching class here, so callers
catch what they mean instead of comparing status codes. Every class derives
from TesseraError, which keeps the code name and the coordinator's message.
"""
import re
from typing import Optional

import grpc


class TesseraError(Exception):
    """A call failed; `code` is the gRPC status name, `details` the message."""

    def __init__(self, details: str, code: str = "UNKNOWN"):
        super().__init__(details)
        self.details = details
        self.code = code


class InvalidJobSpec(TesseraError):
    """The job spec was refused. `field` is the path of the bad field
    (e.g. "model.d_model"), or None when the message names none."""

    def __init__(self, details: str, field: Optional[str] = None):
        super().__init__(details, "INVALID_ARGUMENT")
        self.field = field


class InvalidRequest(TesseraError):
    """A request other than a job spec was refused (a bad page token, a
    rank outside the job, a string over its limit)."""


class NotFound(TesseraError):
    """No job with that id (never existed, or deleted)."""


class PermissionDenied(TesseraError):
    """The token's user may not do this (another user's job)."""


class Unauthenticated(TesseraError):
    """The coordinator checks tokens and got none, or an unknown one."""


class FailedPrecondition(TesseraError):
    """The job is in the wrong state for the request (cancelling a job that
    ended, deleting one that has not, suspending one without checkpoints)."""


class CoordinatorUnavailable(TesseraError):
    """The coordinator could not be reached, or went away during the call.
    `retry_after_s` is how long to wait before trying again."""

    def __init__(self, details: str, retry_after_s: float):
        super().__init__("%s; retry in %g s" % (details, retry_after_s), "UNAVAILABLE")
        self.retry_after_s = retry_after_s


class JobFailed(TesseraError):
    """The job ended without succeeding (FAILED or CANCELLED). `job` is the
    final Job record, `state` its state name, `reason` why it ended."""

    def __init__(self, job):
        from tessera_client.v1 import job_pb2

        self.job = job
        self.state = job_pb2.JobState.Name(job.state)
        self.reason = job.reason
        super().__init__("job %s %s: %s" % (job.id, self.state, job.reason), self.state)


class WaitTimeout(TesseraError, TimeoutError):
    """wait() gave up before the job ended; `job` is the job as last seen."""

    def __init__(self, details: str, job=None):
        super().__init__(details, "DEADLINE_EXCEEDED")
        self.job = job


# Spec errors read "FIELD.PATH: reason" (common/spec_rules.cc), paths with
# indices like "data.sources[2].weight".
_FIELD_PATH = re.compile(r"^([a-z_][a-z0-9_]*(?:\[\d+\])?(?:\.[a-z_][a-z0-9_]*(?:\[\d+\])?)*): ")

# What a caller should wait before retrying an unreachable coordinator.
DEFAULT_RETRY_AFTER_S = 2.0


def spec_field(details: str) -> Optional[str]:
    """The field path a coordinator's spec error starts with, if any."""
    match = _FIELD_PATH.match(details)
    return match.group(1) if match else None


def from_rpc_error(error: grpc.RpcError, address: str, about_spec: bool = False) -> TesseraError:
    """The exception for a failed call; `about_spec` when the request
    carried a job spec, so INVALID_ARGUMENT means a bad spec."""
    code = error.code()
    details = error.details() or code.name
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        if about_spec:
            return InvalidJobSpec(details, spec_field(details))
        return InvalidRequest(details, code.name)
    if code == grpc.StatusCode.NOT_FOUND:
        return NotFound(details, code.name)
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return PermissionDenied(details, code.name)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return Unauthenticated(details, code.name)
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        return FailedPrecondition(details, code.name)
    if code == grpc.StatusCode.UNAVAILABLE:
        return CoordinatorUnavailable("coordinator at %s unavailable (%s)" % (address, details),
                                      DEFAULT_RETRY_AFTER_S)
    return TesseraError(details, code.name)
