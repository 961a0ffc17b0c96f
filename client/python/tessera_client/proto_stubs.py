"""Generates the package's gRPC stubs from the repository's proto/ files.

The stubs are never checked in: setup.py runs this while building the
package, and tests run it into a scratch directory. protoc names modules
after the .proto paths (proto/tessera/v1/job.proto -> proto.tessera.v1),
which would put a top-level `proto` package on every user's path, so the
generated imports are moved under tessera_client.v1.

This file imports nothing generated, so it runs before the stubs exist:
    python3 tessera_client/proto_stubs.py PROTO_ROOT OUT_ROOT
writes OUT_ROOT/tessera_client/v1/*.py for the repository at PROTO_ROOT.
"""
import os
import re
import sys

PROTO_FILES = ("job.proto", "worker.proto", "coordinator.proto")
PROTO_DIR = "proto/tessera/v1"
GENERATED_PACKAGE = "tessera_client.v1"

_PROTOC_IMPORT = re.compile(r"^from proto\.tessera\.v1 import ", re.MULTILINE)
# Message classes name their module (repr, pickle).
_PROTOC_MODULE = re.compile(r"__module__ = 'proto\.tessera\.v1\.")


def generate(proto_root: str, out_root: str) -> str:
    """Writes the v1 stubs under OUT_ROOT/tessera_client/v1; returns that dir."""
    from grpc_tools import protoc  # Debian: python3-grpc-tools

    missing = [name for name in PROTO_FILES
               if not os.path.isfile(os.path.join(proto_root, PROTO_DIR, name))]
    if missing:
        raise FileNotFoundError("no %s under %s" % (", ".join(missing),
                                                     os.path.join(proto_root, PROTO_DIR)))
    scratch = os.path.join(out_root, "tessera_client", "_protoc")
    os.makedirs(scratch, exist_ok=True)
    sources = [os.path.join(PROTO_DIR, name) for name in PROTO_FILES]
    status = protoc.main(["protoc", "-I" + proto_root, "--python_out=" + scratch,
                          "--grpc_python_out=" + scratch] + sources)
    if status != 0:
        raise RuntimeError("protoc failed (exit %d) on %s" % (status, ", ".join(sources)))
    package_dir = os.path.join(out_root, "tessera_client", "v1")
    os.makedirs(package_dir, exist_ok=True)
    generated_dir = os.path.join(scratch, PROTO_DIR)
    for name in sorted(os.listdir(generated_dir)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(generated_dir, name)) as f:
            text = f.read()
        text = _PROTOC_IMPORT.sub("from %s import " % GENERATED_PACKAGE, text)
        text = _PROTOC_MODULE.sub("__module__ = '%s." % GENERATED_PACKAGE, text)
        with open(os.path.join(package_dir, name), "w") as f:
            f.write(text)
    with open(os.path.join(package_dir, "__init__.py"), "w") as f:
        f.write('"""Generated from %s by tessera_client/proto_stubs.py."""\n' % PROTO_DIR)
    _remove_tree(scratch)
    return package_dir


def _remove_tree(path: str) -> None:
    for parent, dirs, files in os.walk(path, topdown=False):
        for name in files:
            os.remove(os.path.join(parent, name))
        for name in dirs:
            os.rmdir(os.path.join(parent, name))
    os.rmdir(path)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: proto_stubs.py PROTO_ROOT OUT_ROOT")
    print(generate(sys.argv[1], sys.argv[2]))
