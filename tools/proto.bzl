"""tessera_cc_proto: C++ messages and gRPC stubs from .proto files.

Runs Debian's /usr/bin/protoc with /usr/bin/grpc_cpp_plugin in a genrule and
wraps the generated sources in a cc_library. Imports are resolved from the
workspace root, so `import "proto/tessera/v1/job.proto";` works anywhere.
"""

def tessera_cc_proto(name, srcs, deps = [], grpc = True, visibility = None):
    outs = []
    for src in srcs:
        stem = src[:-len(".proto")]
        outs += [stem + ".pb.h", stem + ".pb.cc"]
        if grpc:
            outs += [stem + ".grpc.pb.h", stem + ".grpc.pb.cc"]

    plugin = ""
    grpc_out = ""
    if grpc:
        plugin = "--plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin "
        grpc_out = "--grpc_out=$(GENDIR) "

    dep_protos = [d + "_srcs" for d in deps]
    native.filegroup(
        name = name + "_srcs",
        srcs = srcs + dep_protos,
        visibility = visibility,
    )

    native.genrule(
        name = name + "_gen",
        srcs = srcs + dep_protos,
        outs = outs,
        cmd = ("/usr/bin/protoc -I. " + plugin + "--cpp_out=$(GENDIR) " +
               grpc_out + " ".join(["$(location %s)" % s for s in srcs])),
    )

    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["//third_party:protobuf"] + (["//third_party:grpc"] if grpc else []),
        visibility = visibility,
    )
