"""One job's events as `tessera submit --watch --json` writes them
(RUN/events.jsonl), read for the bench scripts' reports: the lines that are
JSON events, in order; the CLI's other lines are skipped.

    sys.path.insert(0, BENCH_DIR); from job_events import read_job_events
    run = read_job_events(os.path.join(run_dir, "events.jsonl"))
    run.steps, run.state, run.reason, run.numerics_warnings, run.spec,
    run.job_id, run.worker_errors
"""
import json
from dataclasses import dataclass, field
from typing import List, Optional


@dataclass
class JobEvents:
    # Each StepMetrics record as a dict, in arrival order, with "_time_ms"
    # added: the event's time (JobEvent.time_unix_ms).
    steps: List[dict] = field(default_factory=list)
    state: Optional[str] = None  # the last state change's state
    reason: str = ""             # the last reason a state change gave
    numerics_warnings: List[dict] = field(default_factory=list)
    spec: dict = field(default_factory=dict)  # the submitted job's spec, from its first event
    job_id: Optional[str] = None  # the submitted job's id, from the same event
    worker_errors: List[dict] = field(default_factory=list)


def read_job_events(path: str) -> JobEvents:
    """The events of `path`; a missing file is an error (OSError)."""
    run = JobEvents()
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            if "spec" in event and not run.spec:
                run.spec = event["spec"]
                run.job_id = event.get("id")
            if isinstance(event.get("step"), dict):
                step = event["step"]
                step["_time_ms"] = int(event.get("time_unix_ms", 0))
                run.steps.append(step)
            elif isinstance(event.get("numerics_warning"), dict):
                run.numerics_warnings.append(event["numerics_warning"])
            elif "state_change" in event:
                run.state = event["state_change"].get("state")
                run.reason = event["state_change"].get("reason", run.reason)
            elif isinstance(event.get("worker_error"), dict):
                run.worker_errors.append(event["worker_error"])
    return run
