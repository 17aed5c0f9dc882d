package server_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/store/postgres/pgtest"
)

// scrape reads srv's /metrics as metric families.
func scrape(t *testing.T, srv string) (map[string]*dto.MetricFamily, []byte) {
	t.Helper()
	resp, err := http.Get(srv + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s\n%s", resp.Status, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams, body
}

// value returns the value of the sample of family name whose labels
// include want; ok is false when there is none.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// exerciseMetrics makes f count something in every server metric: a run
// claimed, logged, its step failed, ended with a reason a runner made up,
// and an error answer.
func exerciseMetrics(t *testing.T, f *fixture) {
	t.Helper()
	run := queueOne(t, f, "")
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	if c := claim(t, r, 0); c == nil {
		t.Fatal("no claim")
	}
	if _, err := appendLog(r, run.ID, 1, 0, "hello\n"); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	exit := 3
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: run.ID, Step: 1, Name: "s", State: api.StepRunning, At: &now}, nil)
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: run.ID, Step: 1, State: api.StepFailed, ExitCode: &exit}, nil)
	procedure(t, r, api.MethodComplete, api.CompleteInput{Run: run.ID, State: api.StateFailed, Reason: "run 42 of alice: my own words"}, nil)
	// An error answer: a run that does not exist.
	_ = f.alice().Procedure(context.Background(), api.MethodCancelRun, api.RunRef{Run: 999}, nil)

}

// The metrics pass Prometheus's own lint (promlint: names, units,
// _total on counters), and a reason a runner made up is counted as
// "other", never as a new label value.
func TestMetrics_PassPromlintAndLabelsStayBounded(t *testing.T) {
	f := newFixture(t, servertest.Options{})
	exerciseMetrics(t, f)
	fams, body := scrape(t, f.URL)
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "knotless_") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
	for name, want := range map[string]map[string]string{
		"knotless_runs_finished_total":    {"state": "failed", "reason": "other"},
		"knotless_runs":                   {"state": "failed", "reason": "other"},
		"knotless_run_queue_wait_seconds": nil,
		"knotless_claim_latency_seconds":  nil,
		"knotless_step_duration_seconds":  {"state": "failed"},
		"knotless_log_bytes_total":        nil,
		"knotless_api_errors_total":       {"code": "404"},
		"knotless_runners_online":         nil,
		"knotless_build_info":             nil,
	} {
		v, ok := value(fams, name, want)
		if !ok || v < 1 {
			t.Errorf("%s%v = %v (present: %v), want >= 1", name, want, v, ok)
		}
	}
	for _, f := range fams {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if strings.ContainsAny(l.GetValue(), " :") || l.GetName() == "run" || l.GetName() == "runner" {
					t.Errorf("%s: label %s=%q is free text or an id", f.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
}

// /healthz answers while the process serves; /readyz answers 503, saying
// why, once the database is gone, and 200 again when it is back.
func TestReadyz_UnreadyWhileTheDatabaseIsDown(t *testing.T) {
	pg := pgtest.Start(t)
	f := newFixture(t, servertest.Options{Database: pg.Database(t)})
	get := func(path string) (int, string) {
		resp, err := http.Get(f.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz with the database up: %d %s", code, body)
	}
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "database") {
		t.Fatalf("/readyz with the database down: %d %q, want 503 naming the database", code, body)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz with the database down: %d, want 200 (the process is alive)", code)
	}
}
