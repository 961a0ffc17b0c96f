"""Probes a Tessera server the way operators' tools do: the standard
grpc.health.v1.Health service and server reflection, with stubs generated
from Debian's grpc-proto files (/usr/share/grpc-proto) and nothing
Tessera-specific.

Usage:
  health_probe.py STUB_DIR ADDRESS check SERVICE... [--tls_ca F --tls_cert F --tls_key F]
      prints one line per service (name and status) and exits 0
  health_probe.py STUB_DIR ADDRESS services [...TLS flags]
      prints every service reflection lists, one a line
  health_probe.py STUB_DIR ADDRESS wait-not-serving [...TLS flags]
      polls the overall status until NOT_SERVING and prints NOT_SERVING;
      exits 1 if the port closes (or 60 s pass) first. Prints "polling"
      once the first answer came back, so a caller can start it first and
      only then tell the server to stop (its drain may be shorter than
      this script's start-up on a loaded machine)
"""
import argparse
import os
import sys
import time

GRPC_PROTO = "/usr/share/grpc-proto"


def generate_stubs(out_dir):
    """Compiles Debian's health and reflection protos under a package of our
    own (the files' proto packages, and so the service names, are unchanged),
    since the generated modules would otherwise live inside grpcio's own
    `grpc` package."""
    import shutil
    from grpc_tools import protoc
    src = os.path.join(out_dir, "protos", "probe")
    os.makedirs(src, exist_ok=True)
    for proto, name in (("grpc/health/v1/health.proto", "health.proto"),
                        ("grpc/reflection/v1alpha/reflection.proto", "reflection.proto")):
        shutil.copy(os.path.join(GRPC_PROTO, proto), os.path.join(src, name))
        rc = protoc.main(["protoc", "-I" + os.path.join(out_dir, "protos"),
                          "--python_out=" + out_dir, "--grpc_python_out=" + out_dir,
                          os.path.join(src, name)])
        if rc != 0:
            raise SystemExit("protoc failed on %s with %d" % (proto, rc))
    sys.path.insert(0, out_dir)


def open_channel(grpc, args):
    if not args.tls_ca:
        return grpc.insecure_channel(args.address)

    def read(path):
        return open(path, "rb").read() if path else None

    return grpc.secure_channel(args.address, grpc.ssl_channel_credentials(
        read(args.tls_ca), read(args.tls_key), read(args.tls_cert)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("stub_dir")
    parser.add_argument("address")
    parser.add_argument("mode", choices=["check", "services", "wait-not-serving"])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--tls_ca")
    parser.add_argument("--tls_cert")
    parser.add_argument("--tls_key")
    args = parser.parse_args()
    generate_stubs(args.stub_dir)
    import grpc
    from probe import health_pb2, health_pb2_grpc
    from probe import reflection_pb2, reflection_pb2_grpc

    channel = open_channel(grpc, args)
    health = health_pb2_grpc.HealthStub(channel)
    status_name = health_pb2.HealthCheckResponse.ServingStatus.Name
    if args.mode == "check":
        for name in args.names or [""]:
            response = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)
            print("%s %s" % (name or "(overall)", status_name(response.status)))
        return 0
    if args.mode == "services":
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        for response in stub.ServerReflectionInfo(iter([request]), timeout=10):
            for service in response.list_services_response.service:
                print(service.name)
        return 0
    deadline = time.time() + 60
    announced = False
    while time.time() < deadline:
        try:
            response = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
        except grpc.RpcError as err:
            print("health check failed before NOT_SERVING: %s" % err.code())
            return 1
        if response.status == health_pb2.HealthCheckResponse.NOT_SERVING:
            print("NOT_SERVING", flush=True)
            return 0
        if not announced:
            print("polling", flush=True)
            announced = True
        time.sleep(0.05)
    print("still SERVING after 60 s")
    return 1


if __name__ == "__main__":
    sys.exit(main())
