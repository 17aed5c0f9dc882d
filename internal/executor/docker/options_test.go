package docker

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/executor"
)

func newOptions(t *testing.T, args ...string) (*Executor, error) {
	t.Helper()
	var o Options
	var j executor.JobFlags
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	o.AddFlags(fs)
	j.AddFlags(fs, Name)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	job, err := j.Job()
	if err != nil {
		return nil, err
	}
	ex, err := o.New(executor.Setup{Runner: "r", Agent: agenttest.Binary(t), Job: job})
	if err != nil {
		return nil, err
	}
	return ex.(*Executor), nil
}

// TestDockerOptions_DiskFloorZeroMeansNone pins the default --disk-floor
// 0, which once failed every start ("size 0 must be greater than zero"),
// and the other flags' defaults and values (no builds without
// --builder-image).
func TestDockerOptions_DiskFloorZeroMeansNone(t *testing.T) {
	e, err := newOptions(t)
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if e.cfg.DiskFloor != 0 || e.cfg.Memory != 2<<30 || e.cfg.Pids != DefaultPids || e.cfg.RunAs != executor.DefaultRunAs || e.caps.MilliCPUs != 1000 {
		t.Errorf("defaults: %+v", e.cfg)
	}
	e, err = newOptions(t, "--disk-floor", "5Gi", "--cpus", "500m", "--memory", "64Mi", "--run-as", "2000:3000", "--pids", "-1")
	if err != nil {
		t.Fatal(err)
	}
	if e.cfg.DiskFloor != 5<<30 || e.caps.MilliCPUs != 500 || e.cfg.Memory != 64<<20 || e.cfg.RunAs != (RunAs{UID: 2000, GID: 3000}) || e.cfg.Pids != -1 {
		t.Errorf("set: %+v caps %+v", e.cfg, e.caps)
	}
	if e.cfg.BuilderImage != "" {
		t.Errorf("builds allowed by default: --builder-image %q", e.cfg.BuilderImage)
	}
	if e, err = newOptions(t, "--builder-image", "registry.example/knotless/builder:1"); err != nil || e.cfg.BuilderImage != "registry.example/knotless/builder:1" {
		t.Errorf("--builder-image: %v %+v", err, e)
	}
	for _, bad := range [][]string{{"--run-as", "0"}, {"--cpus", "0"}, {"--pids", "0"}, {"--disk-floor", "lots"}} {
		if _, err := newOptions(t, bad...); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%v: error %v, want one naming %s", bad, err, bad[0])
		}
	}
}
