package docker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
)

// TestDocker_DoctorChecksEngineRuntimeFloorAndATestContainer: every check
// passes on the test engine, the test container is removed, and a runtime
// the engine lacks and a floor above the free space fail with a fix.
func TestDocker_DoctorChecksEngineRuntimeFloorAndATestContainer(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	cfg.DiskFloor = 1 << 20
	e := f.executor(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var checks []executor.Check
	e.Doctor(ctx, true, func(c executor.Check) { checks = append(checks, c); t.Logf("%v %s: %s", c.OK, c.Name, c.Detail) })
	var names []string
	for _, c := range checks {
		names = append(names, c.Name)
		if !c.OK {
			t.Errorf("check %s failed: %s (fix: %s)", c.Name, c.Detail, c.Fix)
		}
	}
	if got := strings.Join(names, ","); got != "engine reachable,runtime,disk floor,job network,test container with a secret" {
		t.Errorf("checks %s", got)
	}
	if !strings.Contains(checks[0].Detail, "API ") {
		t.Errorf("the engine check does not give the API version: %s", checks[0].Detail)
	}
	list, err := f.eng.Containers(ctx, agentenv.LabelRunner+"="+f.runner)
	if err != nil || len(list) > 0 {
		t.Errorf("left behind: %v, %v", list, err)
	}

	cfg.Runtime, cfg.DiskFloor = "no-such-runtime", 1<<62
	checks = nil
	f.executor(t, cfg).Doctor(ctx, false, func(c executor.Check) { checks = append(checks, c) })
	if len(checks) != 4 || checks[1].OK || !strings.Contains(checks[1].Detail, "no-such-runtime") || checks[1].Fix == "" ||
		checks[2].OK || !strings.Contains(checks[2].Detail, "less than --disk-floor") {
		t.Errorf("checks with a missing runtime and a floor too high: %+v", checks)
	}
}

// TestDocker_DoctorAsTheCommandMakesItRunsItsTestStep: `knotless-run
// doctor` makes an ephemeral executor, whose Prepare never hands the
// workspace to the job's user; the test step failed with "start /bin/sh:
// permission denied" in its root-owned 0700 temporary workspace.
func TestDocker_DoctorAsTheCommandMakesItRunsItsTestStep(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	cfg.Ephemeral = true
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f.executor(t, cfg).Doctor(ctx, true, func(c executor.Check) {
		if !c.OK {
			t.Errorf("check %s failed: %s (fix: %s)", c.Name, c.Detail, c.Fix)
		}
	})
}
