"""cuda_library: compiles .cu files with nvcc and wraps the objects.

nvcc is called by its absolute path from a genrule (through a Bazel label it
cannot find the toolkit's headers inside the sandbox). Code is built for
Hopper (sm_90a machine code) plus compute_90 PTX. Headers that the .cu files
include must be listed in `hdrs` or come from `deps` listed in `hdr_deps`
(filegroups or cc_library hdrs) so that the sandbox holds them.
"""

NVCC = "/usr/local/cuda/bin/nvcc"

NVCC_FLAGS = " ".join([
    "-std=c++17",
    "-O3",
    "-lineinfo",
    "--expt-relaxed-constexpr",
    "-gencode=arch=compute_90a,code=sm_90a",
    "-gencode=arch=compute_90,code=compute_90",
    "-Xcompiler=-fPIC",
    "-I.",
    "-I$(GENDIR)",
])

def cuda_library(name, srcs, hdrs = [], deps = [], hdr_deps = [], visibility = None, **kwargs):
    objs = []
    for src in srcs:
        obj = "_cuda_objs/" + name + "/" + src.replace("/", "_")[:-len(".cu")] + ".o"
        native.genrule(
            name = name + "_" + src.replace("/", "_").replace(".", "_"),
            srcs = [src] + hdrs + hdr_deps,
            outs = [obj],
            # nvcc names its temporary files after its process id; in
            # Bazel's sandbox every action is pid 2 of its own namespace, so
            # two nvcc actions at once would share /tmp/tmpxft_00000002_*
            # and break each other. Each gets a temporary directory of its own.
            cmd = ("tmp=$$(mktemp -d) && TMPDIR=$$tmp " + NVCC + " " + NVCC_FLAGS +
                   " -c $(location " + src + ") -o $@; status=$$?; rm -rf $$tmp; exit $$status"),
        )
        objs.append(obj)

    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["//third_party:cuda_runtime"],
        visibility = visibility,
        alwayslink = True,
        **kwargs
    )
