"""An orchestration tool in another language, driving a job through API v1.

Generates Python stubs from proto/ with grpc_tools, submits a small job to a
running coordinator, watches it to completion, and checks the events. This
is what a Python scheduler integrating with Tessera does, using nothing but
the .proto files.

Usage: python_client.py PROTO_ROOT STUB_DIR COORDINATOR_ADDRESS
"""
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


def main():
    proto_root, stub_dir, address = sys.argv[1:4]
    generate_stubs(proto_root, stub_dir)
    import grpc
    from proto.tessera.v1 import coordinator_pb2, coordinator_pb2_grpc, job_pb2

    channel = grpc.insecure_channel(address)
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


if __name__ == "__main__":
    main()
