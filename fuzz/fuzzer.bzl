"""One macro per fuzz target, so each is declared once and built two ways.

tessera_fuzzer(name = "x_fuzzer", ...) defines:
  x_fuzzer_lib          the harness (LLVMFuzzerTestOneInput), always linked in
  x_fuzzer              the libFuzzer binary; tagged manual, so `bazel test //...`
                        skips it; build it with --config=fuzz (clang-14)
  x_fuzzer_corpus_test  runs every checked-in input of corpus/x/ through the
                        harness with an ordinary main, under any config, so the
                        seeds and the regression inputs of past crashes are
                        replayed by the normal test suite and under --config=asan
"""

def tessera_fuzzer(name, srcs, deps, corpus):
    native.cc_library(
        name = name + "_lib",
        srcs = srcs,
        deps = deps,
        alwayslink = True,
    )
    native.cc_binary(
        name = name,
        deps = [":" + name + "_lib"],
        linkopts = ["-fsanitize=fuzzer"],
        tags = ["manual", "fuzz"],
    )
    native.cc_test(
        name = name + "_corpus_test",
        size = "small",
        deps = [
            ":" + name + "_lib",
            ":corpus_runner",
        ],
        data = native.glob(["corpus/" + corpus + "/*"]),
        args = ["fuzz/corpus/" + corpus],
    )
