"""tessera_client: submit, watch, sweep and read the metrics of Tessera jobs
from Python, over the coordinator's v1 gRPC API (proto/tessera/v1).

    from tessera_client import Client
    with Client("127.0.0.1:50051") as tessera:
        job = tessera.submit("client/examples/default_job.yaml")
        final = tessera.wait(job.id)
        records = tessera.job_metrics(job.id)

The protobuf modules (tessera_client.v1.*_pb2) are generated from proto/
when the package is built (setup.py); they are not in the source tree.
"""
import pkgutil

# Lets the generated tessera_client.v1 live in another sys.path entry than
# these sources (tests and tests/python_client.py generate it into a
# scratch directory; an installed package has it inside).
__path__ = pkgutil.extend_path(__path__, __name__)

from tessera_client.client import DEFAULT_ADDRESS, Client  # noqa: E402
from tessera_client.errors import (CoordinatorUnavailable, FailedPrecondition,  # noqa: E402
                                   InvalidJobSpec, InvalidRequest, JobFailed, NotFound,
                                   PermissionDenied, TesseraError, Unauthenticated, WaitTimeout)
from tessera_client.events import (JobEvent, OtherEvent, StateChanged, StepReported,  # noqa: E402
                                   WorkerFailed)
from tessera_client.job_spec import job_spec_to_dict, load_job_spec  # noqa: E402
from tessera_client.metrics import StepHistory, StepRecord, records_to_frame  # noqa: E402
from tessera_client.v1 import coordinator_pb2, job_pb2  # noqa: E402

__all__ = [
    "Client", "DEFAULT_ADDRESS",
    "TesseraError", "InvalidJobSpec", "InvalidRequest", "NotFound", "PermissionDenied",
    "Unauthenticated", "FailedPrecondition", "CoordinatorUnavailable", "JobFailed",
    "WaitTimeout",
    "JobEvent", "StateChanged", "StepReported", "WorkerFailed", "OtherEvent",
    "load_job_spec", "job_spec_to_dict", "StepHistory", "StepRecord", "records_to_frame",
    "job_pb2", "coordinator_pb2",
]
