"""An orchestration tool in another language, driving a job through API v1.

Generates Python stubs from proto/ with grpc_tools, submits a small job to a
running coordinator, watches it to completion, and checks the events. This
is what a Python scheduler integrating with Tessera does, using nothing but
the .proto files.

Usage: python_client.py PROTO_ROOT STUB_DIR COORDINATOR_ADDRESS
         [--tls_ca FILE [--tls_cert FILE --tls_key FILE]] [--token_file FILE]

With --tls_ca the channel uses TLS (the coordinator's certificate must be
signed by that CA); --token_file sends the token in it as
`authorization: Bearer TOKEN` on every call.
"""
import argparse
import os
import sys


def generate_stubs(proto_root, out_dir):
    from grpc_tools import protoc
    os.makedirs(out_dir, exist_ok=True)
    protos = [os.path.join("proto/tessera/v1", name)
              for name in ("job.proto", "worker.proto", "coordinator.proto")]
    rc = protoc.main(["protoc", "-I" + proto_root, "--python_out=" + out_dir,
                      "--grpc_python_out=" + out_dir] + protos)
    if rc != 0:
        raise SystemExit("protoc failed with %d" % rc)
    sys.path.insert(0, out_dir)


def open_channel(grpc, args):
    """A plaintext channel, or TLS (with a client certificate if given)."""
    if not args.tls_ca:
        return grpc.insecure_channel(args.address)

    def read(path):
        if not path:
            return None
        with open(path, "rb") as f:
            return f.read()

    credentials = grpc.ssl_channel_credentials(
        root_certificates=read(args.tls_ca), private_key=read(args.tls_key),
        certificate_chain=read(args.tls_cert))
    return grpc.secure_channel(args.address, credentials)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("proto_root")
    parser.add_argument("stub_dir")
    parser.add_argument("address")
    parser.add_argument("--tls_ca")
    parser.add_argument("--tls_cert")
    parser.add_argument("--tls_key")
    parser.add_argument("--token_file")
    args = parser.parse_args()
    generate_stubs(args.proto_root, args.stub_dir)
    import grpc
    from proto.tessera.v1 import coordinator_pb2, coordinator_pb2_grpc, job_pb2

    metadata = ()
    if args.token_file:
        with open(args.token_file) as f:
            metadata = (("authorization", "Bearer " + f.read().strip()),)
    channel = open_channel(grpc, args)
    if metadata:
        # Every call carries the token, as the C++ client library does.
        channel = grpc.intercept_channel(channel, _TokenInterceptor(grpc, metadata))
    stub = coordinator_pb2_grpc.CoordinatorStub(channel)

    spec = job_pb2.JobSpec(
        name="from-python",
        model=job_pb2.ModelConfig(vocab_size=256, d_model=32, n_layers=1, n_heads=2,
                                  ffn_dim=64, seq_len=16),
        data=job_pb2.DataConfig(synthetic=job_pb2.SyntheticData(task=job_pb2.SyntheticData.COPY),
                                micro_batch_size=2),
        optimizer=job_pb2.OptimizerConfig(lr=3e-3, warmup_steps=1),
        world_size=2, device_kind=job_pb2.CPU, steps=6, seed=11)

    # A bad spec is refused with INVALID_ARGUMENT naming the field.
    bad = job_pb2.JobSpec()
    bad.CopyFrom(spec)
    bad.world_size = 0
    try:
        stub.SubmitJob(coordinator_pb2.SubmitJobRequest(spec=bad), timeout=10)
        raise SystemExit("bad spec was accepted")
    except grpc.RpcError as err:
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
        assert "world_size" in err.details(), err.details()

    job = stub.SubmitJob(coordinator_pb2.SubmitJobRequest(spec=spec), timeout=10).job
    steps = []
    final_state = None
    for event in stub.WatchJob(coordinator_pb2.WatchJobRequest(job_id=job.id), timeout=120):
        kind = event.WhichOneof("event")
        if kind == "step":
            steps.append(event.step.step)
        elif kind == "state_change":
            final_state = event.state_change.state
    assert steps == list(range(6)), steps
    assert final_state == job_pb2.SUCCEEDED, job_pb2.JobState.Name(final_state)
    got = stub.GetJob(coordinator_pb2.GetJobRequest(job_id=job.id), timeout=10)
    assert got.state == job_pb2.SUCCEEDED and got.steps_done == 6, got
    print("python client: job %s SUCCEEDED after %d steps, loss %.4f"
          % (job.id, got.steps_done, got.last_metrics.loss))


def _TokenInterceptor(grpc, metadata):
    """Adds `metadata` to every unary and server-streaming call."""

    class Details(grpc.ClientCallDetails):
        def __init__(self, base):
            self.method = base.method
            self.timeout = base.timeout
            self.metadata = list(base.metadata or ()) + list(metadata)
            self.credentials = base.credentials
            self.wait_for_ready = base.wait_for_ready
            self.compression = getattr(base, "compression", None)

    class Interceptor(grpc.UnaryUnaryClientInterceptor,
                      grpc.UnaryStreamClientInterceptor):
        def intercept_unary_unary(self, continuation, details, request):
            return continuation(Details(details), request)

        def intercept_unary_stream(self, continuation, details, request):
            return continuation(Details(details), request)

    return Interceptor()


if __name__ == "__main__":
    main()
