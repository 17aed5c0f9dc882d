package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptrace"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/store/sqlite"
	"knotless.dev/knotless/internal/testwait"
)

// BenchmarkWeb_PipelinesTab1000 measures the Pipelines tab of a repository
// holding 1,000 pipelines (2 runs each, real SQLite and git, the server a
// process): time to the first byte and to the whole HTML over HTTP, and the
// full load in Chromium (navigation to the load event: HTML, style sheet,
// script). It reports medians in ms and the page's size in bytes.
func BenchmarkWeb_PipelinesTab1000(b *testing.B) {
	ctx := newBrowser(b)
	w := newWorld(b, 30*time.Second)
	w.pushOne(gatedWorkflow("true"))
	sha := w.git("rev-parse", "HEAD")
	w.stopServer()
	db, err := sqlite.Open(context.Background(), filepath.Join(w.data, "knotless.db"))
	if err != nil {
		b.Fatal(err)
	}
	repo, err := db.RepoByName(context.Background(), "admin", "app")
	if err != nil {
		b.Fatal(err)
	}
	for i := 1; i < 1000; i++ {
		state := []string{api.StateSucceeded, api.StateFailed, api.StateCancelled}[i%3]
		run := store.NewRun{Workflow: "web", WorkflowPath: ".knotless/workflows/web.yml", Source: "steps: []", State: state}
		if _, _, err := db.CreatePipeline(context.Background(), store.NewPipeline{RepoID: repo.ID, Ref: "refs/heads/main", SHA: sha,
			Event: "push", CreatedAt: time.Now(), Runs: []store.NewRun{run, run}}); err != nil {
			b.Fatal(err)
		}
	}
	db.Close()
	w.restartServer()
	signIn(b, ctx, w.url, w.token)

	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar}
	signInHTTP(b, client, w.url, w.token)
	page := w.url + "/" + w.repo
	var ttfb, html, load []time.Duration
	var size int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var first time.Time
		start := time.Now()
		req, _ := http.NewRequest(http.MethodGet, page, nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotFirstResponseByte: func() { first = time.Now() }}))
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || !strings.Contains(string(body), "Older pipelines") {
			b.Fatalf("GET %s: %v %d", page, err, resp.StatusCode)
		}
		done := time.Now()
		size = len(body)
		ttfb = append(ttfb, first.Sub(start))
		html = append(html, done.Sub(start))
		start = time.Now()
		do(b, ctx, "load the Pipelines tab", chromedp.Navigate(page))
		load = append(load, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(ms(median(ttfb)), "ttfb-ms")
	b.ReportMetric(ms(median(html)), "html-ms")
	b.ReportMetric(ms(median(load)), "browser-load-ms")
	b.ReportMetric(float64(size), "page-bytes")
}

// BenchmarkWeb_LiveLogLatency measures how long a line a step prints takes
// to be in the run page's DOM: the step prints its clock (ms) 20 times, a
// line each time the benchmark opens a gate; a MutationObserver in the page
// records when each line was added. It reports the median and the 90th
// percentile of the 20 in ms (run it with -benchtime=1x).
func BenchmarkWeb_LiveLogLatency(b *testing.B) {
	ctx := newBrowser(b)
	w := newWorld(b, 30*time.Second)
	w.startRunner(w.registerRunner("r1"))
	const n = 20
	script := fmt.Sprintf(`i=1
while [ $i -le %d ]; do
  while [ ! -e "$GATE/tick-$i-$KNOTLESS_RUN" ]; do sleep 0.01; done
  echo "tick $i $(date +%%s%%3N)"
  i=$((i+1))
done`, n)
	signIn(b, ctx, w.url, w.token)
	var lat []time.Duration
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		run := w.pushOne(gatedWorkflow(script))
		do(b, ctx, "open the run page", chromedp.Navigate(fmt.Sprintf("%s/-/runs/%d", w.url, run.ID)))
		testwait.Until(b, 30*time.Second, "the event stream", func() (bool, string) {
			s, err := tryEval[string](ctx, `document.documentElement.dataset.stream`)
			return s == "open", fmt.Sprint(s, err)
		})
		eval[bool](b, ctx, `(function () {
  window.__ticks = {};
  new MutationObserver(function (ms) {
    var now = Date.now();
    ms.forEach(function (m) { m.addedNodes.forEach(function (el) {
      var t = el.textContent || "", k = t.match(/tick (\d+) (\d+)$/);
      if (k && !(k[1] in window.__ticks)) window.__ticks[k[1]] = now - parseInt(k[2], 10);
    }); });
  }).observe(document.getElementById("steps"), { childList: true, subtree: true });
  return true;
})()`)
		for i := 1; i <= n; i++ {
			w.openGate(fmt.Sprintf("tick-%d-%d", i, run.ID))
			key := strconv.Itoa(i)
			testwait.Until(b, 30*time.Second, "tick "+key+" in the page", func() (bool, string) {
				v, err := tryEval[float64](ctx, `window.__ticks["`+key+`"] === undefined ? -1 : window.__ticks["`+key+`"]`)
				if err == nil && v >= 0 {
					lat = append(lat, time.Duration(v*float64(time.Millisecond)))
					return true, ""
				}
				return false, fmt.Sprint(v, err)
			})
		}
		w.waitFinal(run.ID, 30*time.Second)
	}
	b.StopTimer()
	b.ReportMetric(ms(median(lat)), "median-ms")
	b.ReportMetric(ms(percentile(lat, 0.9)), "p90-ms")
	b.Logf("live-log latencies (ms): %v", lat)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// percentile is the p-quantile (0..1) of ds (0 when empty).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(int(p*float64(len(s))), len(s)-1)]
}

// signInHTTP signs an HTTP client with a cookie jar in through the form.
func signInHTTP(t testing.TB, c *http.Client, base, token string) {
	t.Helper()
	resp, err := c.PostForm(base+"/-/login", url.Values{"token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 { // redirects followed to the home page
		t.Fatalf("sign in over HTTP: %s", resp.Status)
	}
}
