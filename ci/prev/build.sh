#!/usr/bin/env bash
# Builds the previous release (ci/prev/release names its commit) into
# bin/turbinesql-prev, from that commit's tree exported into a temporary
# directory: no tag, no checkout, no worktree needed, only the commit in
# this clone's history. The module and build caches are shared with the
# main build, so this takes seconds once they are warm. A binary already
# built from the same commit is kept (bin/turbinesql-prev.commit).
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
commit=$(sed -n 's/^commit[[:space:]]*//p' ci/prev/release)
if [ -z "$commit" ]; then
  echo "build-prev: ci/prev/release names no commit" >&2
  exit 1
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
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git archive "$commit" | tar -x -C "$tmp"
mkdir -p bin
rm -f "$out.commit"
(cd "$tmp" && "$GO" build -o "$OLDPWD/$out" ./cmd/turbinesql)
echo "$commit" >"$out.commit"
echo "build-prev: built $out from $commit"
