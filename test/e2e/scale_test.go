package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/store/postgres/pgtest"
	"knotless.dev/knotless/test/scale"
)

// logWriter sends progress lines to t.Log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// make demo-scale, smaller: three server replicas on PostgreSQL behind a
// reverse proxy, runners with the shell executor, one replica killed with
// SIGKILL midway and started again: every run ends exactly once, succeeded,
// with its whole log, and no run is claimed twice: the database's own
// ledger of claims (a trigger on ClaimRun's update, test/scale) holds one
// claim of every run, which the replicas' log lines could not show (a
// killed replica may not have logged its claims).
func TestScale_ReplicaKilledMidwayEveryRunEndsOnceWithItsWholeLog(t *testing.T) {
	pgtest.Require(t)
	sum, err := scale.Run(context.Background(), scale.Config{Bin: binDir, Replicas: 3, Runners: 6, Pipelines: 30,
		Timeout: 5 * time.Minute, Out: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("summary:\n%s", sum)
	if !sum.OK() {
		t.Fatalf("the scenario failed:\n%s", sum)
	}
	if sum.Claims < sum.Pipelines {
		t.Fatalf("the database recorded %d claims of %d runs: the check of claims checked nothing", sum.Claims, sum.Pipelines)
	}
	if !strings.Contains(sum.Killed, "SIGKILL") || !strings.Contains(sum.Killed, "started again") {
		t.Fatalf("no replica was killed and started again: %q", sum.Killed)
	}
}
