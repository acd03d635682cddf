#!/usr/bin/env bash
# Builds the previous release (ci/prev/release names its commit) into
# bin/turbinesql-prev, from that commit's tree exported (git archive) into
# bin/prev-src: no tag, no checkout, no worktree needed, only the commit in
# this clone's history. The module and build caches are shared with the
# main build: the dependencies come from the cache, and the module's own
# packages compile once (about a minute on 2 cores) and are cached for the
# next build from the same directory. (-trimpath would make the cache
# independent of the directory, but then nothing of the main build's
# cache serves: several minutes the first time.) A binary already built
# from the same commit is kept (bin/turbinesql-prev.commit).
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
commit=$(sed -n 's/^commit[[:space:]]*//p' ci/prev/release)
if [ -z "$commit" ]; then
  echo "build-prev: ci/prev/release names no commit" >&2
  exit 1
fi
if ! git cat-file -e "${commit}^{commit}" 2>/dev/null && [ -f "$(git rev-parse --git-dir)/shallow" ]; then
  # A shallow clone (CI may make one): fetch the history from where it
  # came from, once.
  echo "build-prev: shallow clone; fetching the history to reach $commit"
  git fetch --quiet --unshallow 2>/dev/null || git fetch --quiet origin "$commit" 2>/dev/null || true
fi
if ! git cat-file -e "${commit}^{commit}" 2>/dev/null; then
  echo "build-prev: the previous release's commit $commit (ci/prev/release) is not in this clone." >&2
  echo "build-prev: a shallow clone? Fetch the history first: git fetch --unshallow" >&2
  exit 1
fi
out=bin/turbinesql-prev
if [ -x "$out" ] && [ "$(cat "$out.commit" 2>/dev/null)" = "$commit" ]; then
  echo "build-prev: $out is already $commit"
  exit 0
fi
src=bin/prev-src
rm -rf "$src" "$out.commit"
mkdir -p "$src"
git archive "$commit" | tar -x -C "$src"
(cd "$src" && "$GO" build -o "$OLDPWD/$out" ./cmd/turbinesql)
rm -rf "$src"
echo "$commit" >"$out.commit"
echo "build-prev: built $out from $commit"
