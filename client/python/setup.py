"""Builds the tessera_client package, generating its gRPC stubs from the
repository's proto/ while building (tessera_client/proto_stubs.py), so that
the stubs always match the protos and are never checked in.

Offline, with Debian's packages only (python3-grpcio, python3-grpc-tools,
python3-protobuf, python3-yaml, python3-setuptools, python3-wheel), in a
virtual environment made with --system-site-packages:
    pip install ./client/python
There is deliberately no pyproject.toml: pip would then build in an
isolated environment and download setuptools, which cannot work offline.
Into a plain directory: pip install --no-deps --no-index --target DIR ./client/python.
The protos are found at ../../proto from this file (a checkout), or where
$TESSERA_PROTO_ROOT points (the directory that holds proto/).
"""
import importlib.util
import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def proto_root() -> str:
    root = os.environ.get("TESSERA_PROTO_ROOT") or os.path.normpath(os.path.join(HERE, "..", ".."))
    if not os.path.isdir(os.path.join(root, "proto", "tessera", "v1")):
        raise SystemExit("tessera_client: no proto/tessera/v1 under %s; build from a Tessera "
                         "checkout or set TESSERA_PROTO_ROOT" % root)
    return root


class BuildWithStubs(build_py):
    """build_py, then the generated tessera_client.v1 into the build tree."""

    def run(self):
        super().run()
        # Loaded by path: importing the package would need the stubs.
        spec = importlib.util.spec_from_file_location(
            "tessera_proto_stubs", os.path.join(HERE, "tessera_client", "proto_stubs.py"))
        stubs = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(stubs)
        stubs.generate(proto_root(), self.build_lib)


setup(
    name="tessera_client",
    version="0.1.0",
    description="Python client for the Tessera coordinator's v1 API",
    packages=["tessera_client"],
    python_requires=">=3.9",
    # Debian: python3-grpcio, python3-protobuf, python3-yaml. pandas
    # (python3-pandas) and matplotlib are used only when present.
    install_requires=["grpcio", "protobuf", "PyYAML"],
    cmdclass={"build_py": BuildWithStubs},
)
