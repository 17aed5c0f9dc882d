package server_test

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"knotless.dev/knotless/internal/runner"
	"knotless.dev/knotless/internal/server/servertest"
)

// monitoringDir holds the Grafana dashboard and the alert rules.
const monitoringDir = "../../deploy/monitoring"

// metricNames returns the base names of the series expr selects
// (knotless_x_bucket → knotless_x).
func metricNames(t *testing.T, expr string) []string {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Errorf("PromQL %q: %v", expr, err)
		return nil
	}
	var out []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				name = strings.TrimSuffix(name, suffix)
			}
			out = append(out, name)
		}
		return nil
	})
	return out
}

// The alert rules pass Prometheus's own rule checks (rulefmt, as promtool
// check rules does: YAML, PromQL, templates), the dashboard is Grafana
// JSON whose every panel has a valid query, and every knotless_ metric
// they name is one a server or a runner exports: a renamed metric fails
// here, not silently on the operator's wall.
func TestMonitoring_RulesAndDashboardLoadAndNameRealMetrics(t *testing.T) {
	f := newFixture(t, servertest.Options{})
	exerciseMetrics(t, f)
	fams, _ := scrape(t, f.URL)
	exported := map[string]bool{}
	for name := range fams {
		exported[name] = true
	}
	descs := make(chan *prometheus.Desc, 64)
	runner.NewMetrics().Describe(descs)
	close(descs)
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			exported[m[1]] = true
		}
	}
	used := map[string][]string{} // metric → where

	groups, errs := rulefmt.ParseFile(filepath.Join(monitoringDir, "knotless-alerts.yml"), false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.Default())
	for _, err := range errs {
		t.Errorf("alert rules: %v", err)
	}
	if groups == nil {
		t.Fatal("alert rules did not load")
	}
	alerts := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			alerts++
			for _, n := range metricNames(t, r.Expr) {
				used[n] = append(used[n], "alert "+r.Alert)
			}
		}
	}
	if alerts < 3 {
		t.Errorf("%d alert rules, want at least stuck queued runs, runners gone and the error rate", alerts)
	}

	b, err := os.ReadFile(filepath.Join(monitoringDir, "knotless-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string
		UID    string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("dashboard without title, uid or panels: %+v", dash)
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, n := range metricNames(t, tg.Expr) {
				used[n] = append(used[n], "panel "+p.Title)
			}
		}
	}
	for n, where := range used {
		if strings.HasPrefix(n, "knotless_") && !exported[n] {
			t.Errorf("%s (used by %s) is exported by neither knotless-server nor knotless-run", n, strings.Join(where, ", "))
		}
	}
}
