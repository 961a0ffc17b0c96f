"""Typed job events: what Client.watch yields for each JobEvent.

The three kinds a tool acts on get their own classes (a state change, a
step's metrics, a worker's error); the rest (checkpoints, skipped
checkpoints, preemptions, slow ranks) come as OtherEvent carrying the
protobuf message, whose fields coordinator.proto documents. Every event
has the coordinator's sequence number, which a re-subscription resumes
after, and its time.
"""
from dataclasses import dataclass
from typing import Any

from tessera_client.metrics import StepRecord
from tessera_client.v1 import coordinator_pb2, job_pb2

TERMINAL_STATES = frozenset({job_pb2.SUCCEEDED, job_pb2.FAILED, job_pb2.CANCELLED})


@dataclass(frozen=True)
class JobEvent:
    sequence: int
    time_unix_ms: int


@dataclass(frozen=True)
class StateChanged(JobEvent):
    state: str  # a JobState name, e.g. "RUNNING"
    reason: str
    actor: str  # the user whose request made the change; "" for the coordinator's own

    @property
    def terminal(self) -> bool:
        return job_pb2.JobState.Value(self.state) in TERMINAL_STATES


@dataclass(frozen=True)
class StepReported(JobEvent):
    record: StepRecord


@dataclass(frozen=True)
class WorkerFailed(JobEvent):
    worker_id: str
    rank: int
    code: str  # a gRPC status code name, e.g. "ABORTED"
    message: str


@dataclass(frozen=True)
class OtherEvent(JobEvent):
    kind: str  # the JobEvent oneof's field name, e.g. "checkpoint"
    message: Any  # that field's protobuf message


def from_proto(event: coordinator_pb2.JobEvent) -> JobEvent:
    kind = event.WhichOneof("event")
    head = dict(sequence=event.sequence, time_unix_ms=event.time_unix_ms)
    if kind == "state_change":
        change = event.state_change
        return StateChanged(state=job_pb2.JobState.Name(change.state), reason=change.reason,
                            actor=change.actor, **head)
    if kind == "step":
        return StepReported(record=StepRecord.from_proto(event.step, event.time_unix_ms), **head)
    if kind == "worker_error":
        error = event.worker_error
        return WorkerFailed(worker_id=error.worker_id, rank=error.rank, code=error.code,
                            message=error.message, **head)
    return OtherEvent(kind=kind or "", message=getattr(event, kind) if kind else None, **head)
