#!/usr/bin/env bash
# Bazel's workspace status command (.bazelrc): the commit the sources are at,
# for `--version` and `tessera version` (common/build_info.h). Prints
# nothing when the sources are not a git checkout or git is missing; the
# binaries then say "unknown commit". Runs offline and never fails the build.
commit=$(git rev-parse HEAD 2>/dev/null) || exit 0
echo "STABLE_TESSERA_COMMIT ${commit}"
if [[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  echo "STABLE_TESSERA_TREE modified"
else
  echo "STABLE_TESSERA_TREE clean"
fi
exit 0
