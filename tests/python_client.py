"""An orchestration tool in another language, driving a job through API v1
with the tessera_client package (client/python).

Runs the package from the source tree: its stubs are generated from proto/
into STUB_DIR (as setup.py does when it is installed), then a small job is
refused for a bad field, submitted, watched to completion, and checked.

Usage: python_client.py REPO_ROOT STUB_DIR COORDINATOR_ADDRESS
         [--tls_ca FILE [--tls_cert FILE --tls_key FILE]] [--token_file FILE]

With --tls_ca the channel uses TLS (the coordinator's certificate must be
signed by that CA); --token_file sends the token in it as
`authorization: Bearer TOKEN` on every call.
"""
import argparse
import importlib.util
import os
import sys


def use_package_from_source(repo_root, stub_dir):
    """Puts client/python and freshly generated stubs on sys.path."""
    source = os.path.join(repo_root, "client", "python")
    spec = importlib.util.spec_from_file_location(
        "proto_stubs", os.path.join(source, "tessera_client", "proto_stubs.py"))
    stubs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stubs)
    stubs.generate(repo_root, stub_dir)
    sys.path[:0] = [source, stub_dir]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("repo_root")
    parser.add_argument("stub_dir")
    parser.add_argument("address")
    parser.add_argument("--tls_ca")
    parser.add_argument("--tls_cert")
    parser.add_argument("--tls_key")
    parser.add_argument("--token_file")
    args = parser.parse_args()
    use_package_from_source(args.repo_root, args.stub_dir)
    import tessera_client

    spec = {
        "name": "from-python",
        "model": {"vocab_size": 256, "d_model": 32, "n_layers": 1, "n_heads": 2,
                  "ffn_dim": 64, "seq_len": 16},
        "data": {"synthetic": {"task": "COPY"}, "micro_batch_size": 2},
        "optimizer": {"lr": 3e-3, "warmup_steps": 1},
        "world_size": 2, "device_kind": "CPU", "steps": 6, "seed": 11,
    }
    with tessera_client.Client(args.address, tls_ca=args.tls_ca, tls_cert=args.tls_cert,
                               tls_key=args.tls_key, token_file=args.token_file) as client:
        # A bad spec is refused, naming the field.
        try:
            client.submit(dict(spec, world_size=0))
            raise SystemExit("bad spec was accepted")
        except tessera_client.InvalidJobSpec as err:
            assert err.field == "world_size", (err.field, err.details)

        job = client.submit(spec)
        steps = []
        final_state = None
        for event in client.watch(job.id):
            if isinstance(event, tessera_client.StepReported):
                steps.append(event.record.step)
            elif isinstance(event, tessera_client.StateChanged):
                final_state = event.state
        assert steps == list(range(6)), steps
        assert final_state == "SUCCEEDED", final_state
        got = client.get(job.id)
        assert got.state == tessera_client.job_pb2.SUCCEEDED and got.steps_done == 6, got
        print("python client: job %s SUCCEEDED after %d steps, loss %.4f"
              % (job.id, got.steps_done, got.last_metrics.loss))


if __name__ == "__main__":
    main()
