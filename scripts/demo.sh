#!/usr/bin/env bash
# make demo: runs this repository's own pipeline through a real knotless-server
# and a real knotless-run (shell executor), on a temporary data directory, and
# follows its logs to the end. Everything it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD
bin=${BIN:-$top/bin}
export PATH="$bin:/usr/local/go/bin:$PATH"

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

demo=$(mktemp -d "${TMPDIR:-/tmp}/knotless-demo.XXXXXX")
pids=()
cleanup() {
	local status=$?
	for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	if [ "${KEEP_DEMO:-}" = 1 ]; then
		echo "demo files kept in $demo"
	else
		rm -rf "$demo"
	fi
	exit "$status"
}
trap cleanup EXIT INT TERM

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND until it succeeds
	local deadline=$(( $(date +%s) + $1 )) what=$2; shift 2
	until "$@" >/dev/null 2>&1; do
		if [ "$(date +%s)" -ge "$deadline" ]; then echo "timed out waiting for $what" >&2; return 1; fi
		sleep 0.1
	done
}

say "starting knotless-server (data in $demo/server, log in $demo/server.log)"
knotless-server --data "$demo/server" --listen 127.0.0.1:0 >"$demo/server.log" 2>&1 &
pids+=($!)
wait_for 30 "the server to write its URL" test -s "$demo/server/server.url"
wait_for 30 "the admin token" test -s "$demo/server/admin.token"
export KNOTLESS_SERVER; KNOTLESS_SERVER=$(cat "$demo/server/server.url")
export KNOTLESS_TOKEN; KNOTLESS_TOKEN=$(cat "$demo/server/admin.token")
echo "server at $KNOTLESS_SERVER"

say "creating repository admin/knotless"
knotless repo create knotless

say "registering a runner with the shell executor"
# An owner's one-use registration token: the server refuses registrations
# without one.
KNOTLESS_REGISTRATION_TOKEN=$(knotless runner token --repo admin/knotless 2>/dev/null) \
	knotless-run login --server "$KNOTLESS_SERVER" --repo admin/knotless --name demo-shell \
	--labels shell --state "$demo/runner.json"
knotless runner approve demo-shell --repo admin/knotless
# The runner passes the Go caches of this machine to the steps, so the
# pipeline (which builds as `make build` does: no cgo, -trimpath) reuses
# what `make build` compiled instead of starting cold.
knotless-run run --state "$demo/runner.json" --executor shell --work "$demo/work" \
	--env "GOCACHE=$(go env GOCACHE)" --env "GOMODCACHE=$(go env GOMODCACHE)" \
	>"$demo/runner.log" 2>&1 &
pids+=($!)

say "pushing $(git rev-parse --short HEAD) to admin/knotless"
if [ -n "$(git status --porcelain)" ]; then
	echo "(uncommitted changes in the work tree are not part of the push)"
fi
auth=$(printf 'admin:%s' "$KNOTLESS_TOKEN" | base64 -w0)
GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=http.extraHeader GIT_CONFIG_VALUE_0="Authorization: Basic $auth" \
	GIT_TERMINAL_PROMPT=0 git push -q "$KNOTLESS_SERVER/admin/knotless.git" HEAD:refs/heads/main

say "following the pipeline"
status=0
knotless run logs --repo admin/knotless --latest -f --timeout 2m || status=$?

say "runs of the pipeline"
knotless run list --repo admin/knotless --pipeline latest || true
if [ "$status" -eq 0 ]; then
	say "pipeline succeeded"
else
	say "pipeline did not succeed (exit $status); server log: $demo/server.log, runner log: $demo/runner.log"
	KEEP_DEMO=1
fi
exit "$status"
