# Shared by the end-to-end shell tests (sourced, not run): puts the built
# programs first on PATH, makes a temporary directory $work (removed at
# exit) the current one, and defines fail, skip and expect_exit.
: "${TFM_BUILDDIR:=$(pwd)}" "${TFM_SRCDIR:=$(cd "$(dirname "$0")/.." && pwd)}"
PATH="$TFM_BUILDDIR:$PATH"
work=$(mktemp -d "${TMPDIR:-/tmp}/tfm-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*" >&2; exit 77; }

# expect_exit CODE CMD...: runs CMD with stdout in ./out and stderr in
# ./err, and checks its exit status.
expect_exit() {
    want=$1; shift
    set +e; "$@" >out 2>err; got=$?; set -e
    [ "$got" -eq "$want" ] || { cat err >&2; fail "exit $got, expected $want: $*"; }
}
