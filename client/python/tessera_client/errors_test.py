"""Status codes map to one exception class each; spec errors carry the
field path; events come typed from JobEvent messages."""
import unittest

import grpc

from tessera_client import errors, events
from tessera_client.v1 import coordinator_pb2, job_pb2


class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details):
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


class ErrorsTest(unittest.TestCase):
    def test_one_class_per_code(self):
        cases = {
            grpc.StatusCode.NOT_FOUND: errors.NotFound,
            grpc.StatusCode.PERMISSION_DENIED: errors.PermissionDenied,
            grpc.StatusCode.UNAUTHENTICATED: errors.Unauthenticated,
            grpc.StatusCode.FAILED_PRECONDITION: errors.FailedPrecondition,
            grpc.StatusCode.UNAVAILABLE: errors.CoordinatorUnavailable,
            grpc.StatusCode.INVALID_ARGUMENT: errors.InvalidRequest,
            grpc.StatusCode.INTERNAL: errors.TesseraError,
        }
        for code, cls in cases.items():
            err = errors.from_rpc_error(FakeRpcError(code, "why"), "h:1")
            self.assertIs(type(err), cls, code)
        unavailable = errors.from_rpc_error(
            FakeRpcError(grpc.StatusCode.UNAVAILABLE, "gone"), "h:1")
        self.assertGreater(unavailable.retry_after_s, 0)

    def test_a_spec_error_carries_the_field_path(self):
        err = errors.from_rpc_error(FakeRpcError(
            grpc.StatusCode.INVALID_ARGUMENT, "data.sources[1].weight: must be > 0"), "h:1",
            about_spec=True)
        self.assertIsInstance(err, errors.InvalidJobSpec)
        self.assertEqual(err.field, "data.sources[1].weight")
        self.assertIsNone(errors.spec_field("no field here"))

    def test_job_failed_carries_the_reason(self):
        err = errors.JobFailed(job_pb2.Job(id="j-1", state=job_pb2.FAILED, reason="boom"))
        self.assertEqual((err.state, err.reason), ("FAILED", "boom"))


class EventsTest(unittest.TestCase):
    def test_typed_events(self):
        change = events.from_proto(coordinator_pb2.JobEvent(
            sequence=3, state_change=coordinator_pb2.StateChange(state=job_pb2.CANCELLED)))
        self.assertIsInstance(change, events.StateChanged)
        self.assertTrue(change.terminal)
        step = events.from_proto(coordinator_pb2.JobEvent(
            sequence=4, time_unix_ms=9, step=job_pb2.StepMetrics(step=2, loss=1.5)))
        self.assertEqual((step.sequence, step.record.step, step.record.time_unix_ms), (4, 2, 9))
        other = events.from_proto(coordinator_pb2.JobEvent(
            sequence=5, checkpoint=coordinator_pb2.CheckpointCommitted(step=8)))
        self.assertEqual((other.kind, other.message.step), ("checkpoint", 8))


if __name__ == "__main__":
    unittest.main()
