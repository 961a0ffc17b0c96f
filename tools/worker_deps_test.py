"""Holds the rule that the coordinator, the CLI and the fuzzers never depend
on the worker's code.

server/, client/ and fuzz/ share with the worker only what lives in common/
(rules both sides agree on) and formats/ (file formats several binaries
read). Visibility enforces this at build time: every worker/ target is
visible to worker/ itself and, by name, to tests/ and bench/. This test
states the rule on its own, so that widening a worker target's visibility
does not quietly allow such an edge: it reads the BUILD files of server/,
client/ and fuzz/, and of common/ and formats/ (which those three link),
and fails naming each target that lists a //worker label, in any attribute
(deps, data, srcs; visibility lists say who may see a target, not what
it uses, and are skipped). A test cannot run `bazel query`, so the BUILD
files are read as text: comments are dropped, and each label is charged to
the rule (or, in a list comprehension, the ("name", [...]) entry) it
appears in.
"""
import os
import re
import sys
import unittest

# The packages that may not depend on worker/, and any macro file they load.
CHECKED_FILES = [
    "server/BUILD.bazel",
    "client/BUILD.bazel",
    "fuzz/BUILD.bazel",
    "fuzz/fuzzer.bzl",
    "common/BUILD.bazel",
    "formats/BUILD.bazel",
]

# Who may see a target is not what it depends on.
VISIBILITY = re.compile(r'\b(?:default_)?visibility\s*=\s*(?:\[[^\]]*\]|"[^"]*")')
WORKER_LABEL = re.compile(r'"((?:@[\w.-]*)?//worker(?:[/:][^"]*)?)"')
# A rule call with a literal name, or a ("name", [...]) entry of a list
# comprehension that makes rules.
OWNER = re.compile(r'\b(\w+)\(\s*name\s*=\s*"([^"]+)"|\(\s*"([^"]+)"\s*,\s*\[')


def strip_comments(text):
    """Drops # comments, keeping string literals (and line numbers) intact."""
    out = []
    for line in text.split("\n"):
        in_string = None
        cut = len(line)
        i = 0
        while i < len(line):
            c = line[i]
            if in_string:
                if c == "\\":
                    i += 1
                elif c == in_string:
                    in_string = None
            elif c in "\"'":
                in_string = c
            elif c == "#":
                cut = i
                break
            i += 1
        out.append(line[:cut])
    return "\n".join(out)


def worker_edges(path, text):
    """(target, label) for every //worker label in one BUILD or .bzl file."""
    package = os.path.dirname(path)
    text = VISIBILITY.sub("", strip_comments(text))
    owners = [(m.start(), m.group(2) or m.group(3)) for m in OWNER.finditer(text)]
    edges = []
    for m in WORKER_LABEL.finditer(text):
        owner = "(file level)"
        for start, name in owners:
            if start > m.start():
                break
            owner = name
        edges.append(("//%s:%s" % (package, owner), m.group(1)))
    return edges


def workspace_root():
    # Bazel runs a test from its runfiles tree, the workspace's files under it.
    srcdir, workspace = os.environ.get("TEST_SRCDIR"), os.environ.get("TEST_WORKSPACE")
    if srcdir and workspace and os.path.isdir(os.path.join(srcdir, workspace)):
        return os.path.join(srcdir, workspace)
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


class WorkerDepsTest(unittest.TestCase):
    def test_no_checked_package_depends_on_worker(self):
        root = workspace_root()
        violations = []
        for path in CHECKED_FILES:
            full = os.path.join(root, path)
            self.assertTrue(os.path.isfile(full), "%s is missing from the test's data" % path)
            with open(full) as f:
                text = f.read()
            if path.endswith("BUILD.bazel"):
                self.assertTrue(OWNER.search(strip_comments(text)), "%s holds no rules" % path)
            for target, label in worker_edges(path, text):
                violations.append("%s (%s) depends on %s" % (target, path, label))
        self.assertEqual(
            violations, [],
            "server/, client/ and fuzz/ (and common/ and formats/, which they link) may not "
            "depend on worker/; move what they share to common/ (a rule) or formats/ (a file "
            "format):\n  " + "\n  ".join(violations))

    def test_the_reader_finds_labels_in_rules_and_comprehensions(self):
        text = """
# "//worker/data:in_a_comment" is not a dependency.
cc_library(
    name = "status",
    srcs = ["status.cc"],  # "//worker:also_a_comment"
    deps = ["//common:sha256", "//worker/data:token_file"],
)
sh_test(name = "uses_binary", data = ["@tessera//worker:tessera-worker"])
[cc_test(
    name = name,
    deps = deps,
) for name, deps in [
    ("a_test", [":status"]),
    ("b_test", ["//worker/trainer"]),
]]
cc_library(
    name = "fine",
    visibility = ["//worker/trainer:__pkg__"],
    deps = ["//workers_elsewhere:x", "//common:worker_stub"],
)
"""
        self.assertEqual(worker_edges("server/BUILD.bazel", text), [
            ("//server:status", "//worker/data:token_file"),
            ("//server:uses_binary", "@tessera//worker:tessera-worker"),
            ("//server:b_test", "//worker/trainer"),
        ])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
