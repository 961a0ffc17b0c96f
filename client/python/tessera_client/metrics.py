"""Step metrics as data: one flat record per optimizer step, counted once.

A job that restarts resumes from its checkpoint and reports the steps after
it again; StepMetrics.attempt tells the attempts apart. The rule, as in
proto/tessera/v1/job.proto and common/step_history.h (which the CLI and the
status page follow): per step keep the record of the highest attempt, and of
those the later one. StepHistory applies it; records_to_frame turns the
result into a pandas DataFrame where pandas is installed (python3-pandas).
"""
import dataclasses
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional

from tessera_client.v1 import job_pb2


@dataclass(frozen=True)
class StepRecord:
    """One step's StepMetrics, flattened: phases and validation as columns."""
    step: int
    attempt: int
    loss: float
    grad_norm: float
    lr: float
    tokens: int
    tokens_per_s: float
    step_time_s: float
    control_overhead_s: float
    mfu: float
    # Where the slowest rank's step time went (StepPhases), seconds.
    forward_s: float
    loss_s: float
    backward_s: float
    recompute_s: float
    optimizer_s: float
    collective_s: float
    host_s: float
    # collective_s by where the step waited (StepPhases.collective_waits).
    wait_first_gather_s: float
    wait_forward_gather_s: float
    wait_head_gather_s: float
    wait_backward_gather_s: float
    wait_gradient_buffer_s: float
    wait_gradient_reduce_s: float
    wait_final_reduce_s: float
    wait_all_reduce_s: float
    checkpoint_wait_s: float
    checkpoint_snapshot_s: float
    # Set on the steps after which the validation data was scored.
    validation_loss: Optional[float]
    validation_tokens: Optional[int]
    peak_memory_bytes: int
    peak_memory_rank: int
    # When the coordinator recorded the step (JobEvent.time_unix_ms; 0 if
    # the record did not come from an event).
    time_unix_ms: int = 0

    @classmethod
    def from_proto(cls, m: job_pb2.StepMetrics, time_unix_ms: int = 0) -> "StepRecord":
        p = m.phases
        validated = m.HasField("validation")
        return cls(
            step=m.step, attempt=m.attempt, loss=m.loss, grad_norm=m.grad_norm, lr=m.lr,
            tokens=m.tokens, tokens_per_s=m.tokens_per_s, step_time_s=m.step_time_s,
            control_overhead_s=m.control_overhead_s, mfu=m.mfu,
            forward_s=p.forward_s, loss_s=p.loss_s, backward_s=p.backward_s,
            recompute_s=p.recompute_s, optimizer_s=p.optimizer_s,
            collective_s=p.collective_s, host_s=p.host_s,
            **{f"wait_{field.name}": getattr(p.collective_waits, field.name)
               for field in job_pb2.CollectiveWaits.DESCRIPTOR.fields},
            checkpoint_wait_s=p.checkpoint_wait_s,
            checkpoint_snapshot_s=p.checkpoint_snapshot_s,
            validation_loss=m.validation.loss if validated else None,
            validation_tokens=m.validation.tokens if validated else None,
            peak_memory_bytes=m.peak_memory_bytes, peak_memory_rank=m.peak_memory_rank,
            time_unix_ms=time_unix_ms)


COLUMNS = [f.name for f in dataclasses.fields(StepRecord)]


class StepHistory:
    """Keeps one record per step under the restart rule."""

    def __init__(self) -> None:
        self._by_step: Dict[int, StepRecord] = {}

    def add(self, record: StepRecord) -> bool:
        """Keeps `record` unless its step has one of a later attempt;
        records arrive in event order, so an equal attempt replaces."""
        kept = self._by_step.get(record.step)
        if kept is not None and kept.attempt > record.attempt:
            return False
        self._by_step[record.step] = record
        return True

    def records(self) -> List[StepRecord]:
        """By step, one each."""
        return [self._by_step[step] for step in sorted(self._by_step)]


def counted_once(records: Iterable[StepRecord]) -> List[StepRecord]:
    """`records` in event order, reduced to one per step."""
    history = StepHistory()
    for record in records:
        history.add(record)
    return history.records()


def records_to_frame(records: Iterable[StepRecord]):
    """A pandas DataFrame indexed by step, one column per StepRecord field.
    ImportError (naming the Debian package) when pandas is missing."""
    try:
        import pandas
    except ImportError as err:
        raise ImportError("records_to_frame needs pandas (Debian: python3-pandas); "
                          "the records themselves are plain dataclasses") from err
    rows = [dataclasses.asdict(r) for r in records]
    return pandas.DataFrame(rows, columns=COLUMNS).set_index("step", drop=False)
