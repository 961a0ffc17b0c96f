"""Client: the v1 Coordinator API for Python orchestration tools.

Each method is one call to the coordinator (list and watch may be several),
returning protobuf messages (Job, WorkerRecord, LogLine,
PlacementExplanation) or the dataclasses of events.py and metrics.py, and
raising the exceptions of errors.py.

Retries cover connecting only, as the CLI's SubmitJob and DeleteJob do
(client/client.h): every call is made wait_for_ready, so gRPC holds the
request until the channel is connected (reconnecting with backoff
meanwhile, up to connect_timeout_s) and then sends it exactly once; a job
is never submitted twice by a retry. A call that fails after it was sent
raises; the caller decides. watch is the exception by design: a
dropped stream is re-subscribed after the last event delivered
(WatchJobRequest.after_sequence), which repeats and misses nothing.
"""
import os
import threading
import time
from typing import Iterable, Iterator, List, Optional, Sequence, Union

import grpc

from tessera_client import credentials as credentials_lib
from tessera_client import events as events_lib
from tessera_client.errors import (CoordinatorUnavailable, DEFAULT_RETRY_AFTER_S, JobFailed,
                                   TesseraError, WaitTimeout, from_rpc_error)
from tessera_client.job_spec import SpecLike, load_job_spec
from tessera_client.metrics import StepHistory, StepRecord, records_to_frame
from tessera_client.v1 import coordinator_pb2, coordinator_pb2_grpc, job_pb2, worker_pb2

DEFAULT_ADDRESS = "127.0.0.1:50051"

# WatchJobRequest.from_step past any real step: only state changes, worker
# errors and the other non-step events are sent.
_NO_STEPS = 2**31 - 1

JobStateLike = Union[int, str]


class Client:
    """A connection to one coordinator. Thread-safe as gRPC channels are;
    close() it, or use it as a context manager."""

    def __init__(self, address: Optional[str] = None, tls_ca: Optional[str] = None,
                 token_file: Optional[str] = None, tls_cert: Optional[str] = None,
                 tls_key: Optional[str] = None, call_timeout_s: float = 10.0,
                 connect_timeout_s: float = 10.0, reconnect_timeout_s: float = 60.0):
        """`address` defaults to $TESSERA_COORDINATOR, else 127.0.0.1:50051.
        TLS files and the token follow the CLI's rules (credentials.py): the
        token comes from `token_file`, $TESSERA_TOKEN_FILE or $TESSERA_TOKEN.
        `connect_timeout_s` bounds each wait for a connection;
        `reconnect_timeout_s` how long watch tries to get a dropped stream
        back before it raises CoordinatorUnavailable."""
        self.address = address or os.environ.get("TESSERA_COORDINATOR") or DEFAULT_ADDRESS
        self._call_timeout_s = call_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._reconnect_timeout_s = reconnect_timeout_s
        creds = credentials_lib.resolve(tls_ca, tls_cert, tls_key, token_file)
        # gRPC's own reconnect backoff, bounded as the C++ client bounds it,
        # so a coordinator that comes back is found within seconds.
        options = [("grpc.initial_reconnect_backoff_ms", 100),
                   ("grpc.min_reconnect_backoff_ms", 100),
                   ("grpc.max_reconnect_backoff_ms", 2000),
                   ("grpc.keepalive_time_ms", 30000),
                   ("grpc.keepalive_timeout_ms", 10000)]
        self._channel = credentials_lib.open_channel(self.address, creds, options)
        self._stub = coordinator_pb2_grpc.CoordinatorStub(self._channel)
        # The channel's latest connectivity, for _ConnectionGuard: a call
        # still waiting when connect_timeout_s runs out on a channel that is
        # not READY never connected. It arrives from a polling thread, so it
        # can lag a connection that answered at once. Watching it never asks
        # the channel to connect; calls do.
        self._connectivity = grpc.ChannelConnectivity.IDLE
        self._channel.subscribe(self._track_connectivity, try_to_connect=False)

    def _track_connectivity(self, connectivity: grpc.ChannelConnectivity) -> None:
        self._connectivity = connectivity

    def close(self) -> None:
        self._channel.unsubscribe(self._track_connectivity)
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # Jobs.

    def submit(self, spec: SpecLike, dry_run: bool = False
               ) -> Union[job_pb2.Job, coordinator_pb2.PlacementExplanation]:
        """Submits a job: `spec` is a JobSpec, a dict of its fields or a
        YAML/JSON job file path. Returns the new Job. With dry_run, creates
        nothing and returns the PlacementExplanation: where it would run
        now, whom it would preempt, or what it would wait for.
        InvalidJobSpec names the bad field."""
        job_spec = load_job_spec(spec)
        if dry_run:
            return self._call(self._stub.ExplainPlacement,
                              coordinator_pb2.ExplainPlacementRequest(spec=job_spec),
                              about_spec=True)
        return self._call(self._stub.SubmitJob, coordinator_pb2.SubmitJobRequest(spec=job_spec),
                          about_spec=True,
                          if_lost="the job may exist: list jobs before submitting again").job

    def get(self, job_id: str) -> job_pb2.Job:
        return self._call(self._stub.GetJob, coordinator_pb2.GetJobRequest(job_id=job_id))

    def list(self, states: Iterable[JobStateLike] = (), owner: str = "",
             only_mine: bool = False, page_size: int = 0) -> List[job_pb2.Job]:
        """Every matching job, newest first, following the coordinator's
        pages (page_size per page; 0: the coordinator's 100)."""
        request = coordinator_pb2.ListJobsRequest(
            states=[_state(s) for s in states], owner=owner, only_mine=only_mine,
            page_size=page_size)
        jobs: List[job_pb2.Job] = []
        while True:
            page = self._call(self._stub.ListJobs, request)
            if page.next_page_token and (not page.jobs or
                                         page.next_page_token == request.page_token):
                raise TesseraError("coordinator's ListJobs pages do not advance", "DATA_LOSS")
            jobs.extend(page.jobs)
            if not page.next_page_token:
                return jobs
            request.page_token = page.next_page_token

    def cancel(self, job_id: str, reason: str = "") -> job_pb2.Job:
        """FailedPrecondition if the job already ended."""
        return self._call(self._stub.CancelJob,
                          coordinator_pb2.CancelJobRequest(job_id=job_id, reason=reason))

    def delete(self, job_id: str) -> None:
        """Forgets an ended job; FailedPrecondition if it has not ended."""
        self._call(self._stub.DeleteJob, coordinator_pb2.DeleteJobRequest(job_id=job_id))

    def checkpoint(self, job_id: str) -> job_pb2.Job:
        """A checkpoint at the next step boundary; the job trains on."""
        return self._call(self._stub.CheckpointJob,
                          coordinator_pb2.CheckpointJobRequest(job_id=job_id))

    def suspend(self, job_id: str, reason: str = "") -> job_pb2.Job:
        """A checkpoint at the next step boundary, then SUSPENDED."""
        return self._call(self._stub.SuspendJob,
                          coordinator_pb2.SuspendJobRequest(job_id=job_id, reason=reason))

    def resume(self, job_id: str) -> job_pb2.Job:
        """Queues a SUSPENDED job again, to resume from its checkpoint."""
        return self._call(self._stub.ResumeJob, coordinator_pb2.ResumeJobRequest(job_id=job_id))

    def workers(self) -> List[coordinator_pb2.WorkerRecord]:
        return list(self._call(self._stub.ListWorkers,
                               coordinator_pb2.ListWorkersRequest()).workers)

    # Streams.

    def logs(self, job_id: str, ranks: Sequence[int] = (),
             follow: bool = False) -> Iterator[worker_pb2.LogLine]:
        """The job's log lines (of `ranks`; empty: all) in time order; with
        follow, then new lines until the job ends."""
        call = self._stub.StreamJobLogs(
            coordinator_pb2.StreamJobLogsRequest(job_id=job_id, ranks=list(ranks), follow=follow),
            timeout=None if follow else 300.0, wait_for_ready=True)
        guard = _ConnectionGuard(self, call, self._connect_timeout_s)
        try:
            for line in call:
                yield line
        except grpc.RpcError as err:
            raise guard.explain(err) from None
        finally:
            guard.disarm()
            call.cancel()

    def watch(self, job_id: str, from_step: int = 0,
              after_sequence: int = 0) -> Iterator[events_lib.JobEvent]:
        """The job's events, earlier ones first (steps from `from_step`,
        events after `after_sequence`), until its terminal state change.
        A dropped stream (the coordinator restarted) is re-subscribed after
        the last event delivered, so no event comes twice and none is
        missed; CoordinatorUnavailable after reconnect_timeout_s without one."""
        return self._events(job_id, from_step, after_sequence, deadline=None)

    def wait(self, job_id: str, timeout: Optional[float] = None) -> job_pb2.Job:
        """Blocks until the job ends. Returns the final Job if it SUCCEEDED;
        raises JobFailed (FAILED or CANCELLED, with the reason) or
        WaitTimeout after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        events = self._events(job_id, _NO_STEPS, 0, deadline)
        try:
            for event in events:
                if isinstance(event, events_lib.StateChanged) and event.terminal:
                    break
        finally:
            events.close()
        job = self.get(job_id)
        if job.state != job_pb2.SUCCEEDED:
            raise JobFailed(job)
        return job

    def job_metrics(self, job_id: str, as_frame: bool = False):
        """The job's step records, one per step (metrics.py's rule for
        restarts), by step: those recorded when the call is made. A list of
        StepRecord, or with as_frame a pandas DataFrame (needs pandas)."""
        job = self.get(job_id)
        history = StepHistory()
        ended = job.state in events_lib.TERMINAL_STATES
        if ended or job.HasField("last_metrics"):
            stream = self._job_events(job_id, 0, 0, deadline=None)
            try:
                for message in stream:
                    if message.WhichOneof("event") != "step":
                        continue
                    history.add(StepRecord.from_proto(message.step, message.time_unix_ms))
                    # A running job's stream never ends: stop at the record
                    # GetJob reported as its latest (the whole record, since
                    # a job resumed after a coordinator restart reports its
                    # step numbers again under the same attempt).
                    if not ended and message.step == job.last_metrics:
                        break
            finally:
                stream.close()
        records = history.records()
        return records_to_frame(records) if as_frame else records

    # Plumbing.

    def _unreachable(self, within_s: float) -> CoordinatorUnavailable:
        return CoordinatorUnavailable(
            "cannot reach coordinator at %s (no connection within %g s)"
            % (self.address, within_s), DEFAULT_RETRY_AFTER_S)

    def _call(self, method, request, about_spec: bool = False, if_lost: str = ""):
        """Sends `request` once, after waiting up to connect_timeout_s for
        a connection; call_timeout_s bounds the answer. `if_lost` is what
        a caller should know when the answer was lost after the request
        went out."""
        future = method.future(request, timeout=self._connect_timeout_s + self._call_timeout_s,
                               wait_for_ready=True)
        guard = _ConnectionGuard(self, future, self._connect_timeout_s)
        try:
            return future.result()
        except grpc.FutureCancelledError:
            raise guard.explain(None) from None
        except grpc.RpcError as err:
            # A wait_for_ready call that never connected ends cancelled by
            # the guard, above. An error that comes back as an answer was
            # sent: the connectivity snapshot may not have caught up with a
            # connection that answered at once, so it is not consulted here.
            error = from_rpc_error(err, self.address, about_spec)
            if if_lost and err.code() in (grpc.StatusCode.DEADLINE_EXCEEDED,
                                          grpc.StatusCode.UNAVAILABLE):
                error = CoordinatorUnavailable("%s: sent, but no answer came (%s); %s" % (
                    self.address, err.details() or err.code().name, if_lost),
                    DEFAULT_RETRY_AFTER_S)
            raise error from None
        finally:
            guard.disarm()

    def _events(self, job_id: str, from_step: int, after_sequence: int,
                deadline: Optional[float]) -> Iterator[events_lib.JobEvent]:
        messages = self._job_events(job_id, from_step, after_sequence, deadline)
        try:
            for message in messages:
                yield events_lib.from_proto(message)
        finally:
            messages.close()  # ends the stream when the caller stops early

    def _job_events(self, job_id: str, from_step: int, after_sequence: int,
                    deadline: Optional[float]) -> Iterator[coordinator_pb2.JobEvent]:
        """JobEvent messages, each once, until the terminal state change;
        re-subscribes after a dropped stream (see watch)."""
        last = after_sequence
        dropped_at = None  # when the stream last broke with nothing since
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise WaitTimeout("job %s did not end in time" % job_id)
            connect_s = self._connect_timeout_s
            if dropped_at is not None:
                connect_s = max(0.1, dropped_at + self._reconnect_timeout_s - time.monotonic())
            request = coordinator_pb2.WatchJobRequest(job_id=job_id, from_step=from_step,
                                                      after_sequence=last)
            call = self._stub.WatchJob(request, timeout=remaining, wait_for_ready=True)
            guard = _ConnectionGuard(self, call, connect_s)
            try:
                for message in call:
                    dropped_at = None
                    if message.sequence <= last:
                        continue  # replayed after a re-subscription
                    last = message.sequence
                    yield message
                    if (message.WhichOneof("event") == "state_change"
                            and message.state_change.state in events_lib.TERMINAL_STATES):
                        return
            except grpc.RpcError as err:
                code = err.code()
                if code == grpc.StatusCode.DEADLINE_EXCEEDED and deadline is not None:
                    raise WaitTimeout("job %s did not end in time" % job_id) from None
                if code != grpc.StatusCode.UNAVAILABLE:
                    raise guard.explain(err) from None
            finally:
                guard.disarm()
                call.cancel()
            # The stream broke (or closed before the job ended): resubscribe.
            if dropped_at is None:
                dropped_at = time.monotonic()
            elif time.monotonic() - dropped_at > self._reconnect_timeout_s:
                raise CoordinatorUnavailable(
                    "lost the event stream of job %s at %s and could not get it back within "
                    "%g s" % (job_id, self.address, self._reconnect_timeout_s),
                    DEFAULT_RETRY_AFTER_S)


class _ConnectionGuard:
    """Bounds how long a wait_for_ready call waits for a connection (a
    stream has no deadline at all: jobs run for hours): if the channel is
    not connected `within_s` after the call starts, the call is cancelled
    and explain() reports the coordinator unreachable."""

    def __init__(self, client: Client, call, within_s: float):
        self._client, self._call, self._within_s = client, call, within_s
        self._gave_up = False
        self._timer = threading.Timer(within_s, self._check)
        self._timer.daemon = True
        self._timer.start()

    def _check(self) -> None:
        if self._client._connectivity != grpc.ChannelConnectivity.READY:
            self._gave_up = True
            self._call.cancel()

    def disarm(self) -> None:
        self._timer.cancel()

    def explain(self, err: Optional[grpc.RpcError]) -> TesseraError:
        if self._gave_up or err is None:
            return self._client._unreachable(self._within_s)
        return from_rpc_error(err, self._client.address)


def _state(state: JobStateLike) -> int:
    return job_pb2.JobState.Value(state) if isinstance(state, str) else int(state)
