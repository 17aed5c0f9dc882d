package runner

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/executor/shell"
	"knotless.dev/knotless/internal/server/servertest"
)

const idWorkflow = `
on: {push: {}}
id-tokens:
  DEPLOY: {aud: https://kube.example}
steps:
  - name: asks
    id-tokens: [DEPLOY]
    run: |
      echo "token=$DEPLOY"
      printf '%s' "$DEPLOY" > token.txt
      echo "length=${#DEPLOY}"
  - name: does-not-ask
    run: |
      echo "token=${DEPLOY-unset}"
      cat token.txt; echo
`

// A step that lists an id token gets the value the server gives for its
// start, as a variable masked in its log and in later steps' logs; a step
// that does not list it has no such variable.
func TestExecute_IDTokenReachesOnlyTheStepThatListsItAndIsMaskedEverywhere(t *testing.T) {
	const value = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJyZXBvIn0.c2lnbmF0dXJl"
	job := testJob(t, idWorkflow)
	var mu sync.Mutex
	var asked []string
	var at time.Time
	job.IDTokens = func(ctx context.Context, step int, names []string, issuedAt time.Time) (map[string]string, error) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, strings.Join(names, ",")+"@"+strconv.Itoa(step))
		at = issuedAt
		return map[string]string{"DEPLOY": value}, nil
	}
	rep, res := execute(t, context.Background(), job)
	if res.State != api.StateSucceeded {
		t.Fatalf("result %+v\n%s", res, rep.log(0))
	}
	if strings.Join(asked, " ") != "DEPLOY@1" {
		t.Errorf("asked for %v, want DEPLOY of step 1 once", asked)
	}
	if d := time.Since(at); at.IsZero() || d > time.Minute {
		t.Errorf("issued at %v, want the step's start", at)
	}
	one, two := rep.log(1), rep.log(2)
	if strings.Contains(one+two, value) || !strings.Contains(one, "token=***") || !strings.Contains(one, "length="+strconv.Itoa(len(value))) {
		t.Errorf("step 1 log:\n%s", one)
	}
	if !strings.Contains(two, "token=unset") || !strings.Contains(two, "***") {
		t.Errorf("step 2 (did not ask; prints the file step 1 wrote) log:\n%s", two)
	}
}

// A step whose id token the server does not give does not run: it ends
// errored/id-token, saying why; knotless-run exec (no server) runs it
// without, saying so.
func TestExecute_IDTokenRefusedErrorsTheStepAndExecRunsWithout(t *testing.T) {
	job := testJob(t, idWorkflow)
	job.IDTokens = func(context.Context, int, []string, time.Time) (map[string]string, error) {
		return nil, errors.New("Forbidden: the lease has lapsed")
	}
	rep, res := execute(t, context.Background(), job)
	if res.State != api.StateErrored || res.Reason != api.ReasonIDToken || !strings.Contains(res.Message, "lease has lapsed") {
		t.Fatalf("result %+v, want errored/id-token naming the server's answer", res)
	}
	if f := rep.final(); f[1].State != api.StepErrored || f[1].Reason != api.ReasonIDToken || f[2].State != api.StepSkipped {
		t.Errorf("steps %+v", f)
	}
	if strings.Contains(rep.log(1), "token=") {
		t.Errorf("the step ran: %q", rep.log(1))
	}

	job = testJob(t, idWorkflow)
	rep, res = execute(t, context.Background(), job)
	if res.State != api.StateSucceeded || !strings.Contains(rep.log(0), "knotless-run exec has none: the step runs without them") ||
		!strings.Contains(rep.log(1), "token=\n") {
		t.Errorf("exec: %+v\nsetup:\n%s\nstep 1:\n%s", res, rep.log(0), rep.log(1))
	}
}

// Through a real server: the step's DEPLOY is a JWT the server signed for
// this run (its payload names the repository's main branch and the
// audience), masked in the log; a step that did not ask has none.
func TestIntegration_StepGetsTheServersIDTokenMasked(t *testing.T) {
	w := newWorld(t, true)
	w.startRunner(nil)
	run := w.push(map[string]string{".knotless/workflows/ci.yml": wfHead + `
id-tokens:
  DEPLOY: {aud: https://kube.example}
steps:
  - name: deploy
    id-tokens: [DEPLOY]
    run: |
      echo "token: $DEPLOY"
      p=$(printf %s "$DEPLOY" | cut -d. -f2 | tr '_-' '/+')
      while [ $(( ${#p} % 4 )) -ne 0 ]; do p="$p="; done
      printf %s "$p" | base64 -d; echo
  - name: not-asked
    run: |
      echo "token: ${DEPLOY-unset}"
`})
	final := w.waitFinal(run.ID, 60*time.Second)
	if final.State != api.StateSucceeded {
		t.Fatalf("run %+v\n%s", final, w.stepLog(run.ID, 0))
	}
	log := string(w.stepLog(run.ID, 1))
	for _, want := range []string{"token: ***\n", `"sub":"repo:` + final.Repo + `:ref:refs/heads/main"`, `"aud":"https://kube.example"`, `"run_id":"` + strconv.FormatInt(run.ID, 10) + `"`} {
		if !strings.Contains(log, want) {
			t.Errorf("step log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "eyJ") {
		t.Errorf("step log holds something token-like:\n%s", log)
	}
	if got := string(w.stepLog(run.ID, 2)); got != "token: unset\n" {
		t.Errorf("step that did not ask: %q", got)
	}
}

// BenchmarkStepStart_IDTokenBesideBaseline measures the delay an id token
// adds to a step's start: one-step runs (`true`) on the shell executor,
// whose step asks a real server (servertest) for its token at its start,
// beside the same run asking for none, in one benchmark. Figures (median
// of the iterations): run-ms, the whole run; token-ms, the call to the
// server alone. run-ms of the two beside each other is the delay (the
// call, and masking a value as long as a token in the step's log).
//
//	go test ./internal/runner -run '^$' -bench StepStart -benchtime 20x
func BenchmarkStepStart_IDTokenBesideBaseline(b *testing.B) {
	const wf = "on: {push: {}}\nid-tokens:\n  DEPLOY: {aud: https://kube.example}\nsteps:\n  - id-tokens: [DEPLOY]\n    run: \"true\"\n"
	const bare = "on: {push: {}}\nsteps:\n  - run: \"true\"\n"
	f := servertest.Start(b, servertest.Options{})
	tok := f.CreateAccount(b, "alice")
	f.CreateRepo(b, tok, "app")
	r := f.RegisterRunner(b, "alice/app", "bench", nil, true)
	f.Push(b, "alice/app", tok, map[string]string{".knotless/workflows/ci.yml": wf}, "main")
	var out api.ClaimOutput
	if err := r.Client.Procedure(b.Context(), api.MethodClaim, api.ClaimInput{Wait: 5}, &out); err != nil || out.Run == nil {
		b.Fatalf("claim: %v", err)
	}
	ex := shell.New(shell.Config{Config: agentenv.Config{Agent: agenttest.Binary(b), Ephemeral: true, Logger: slog.New(slog.DiscardHandler)},
		Dir: filepath.Join(b.TempDir(), "shell")})
	for _, tc := range []struct {
		name, src string
		tokens    IDTokenFunc
	}{
		{"baseline=no-token", bare, nil},
		{"id-token", wf, ServerIDTokens(api.NewRunnerClient(r.Client), out.Run.Run.ID, 0)},
	} {
		var calls []time.Duration
		if tc.tokens != nil {
			inner := tc.tokens
			tc.tokens = func(ctx context.Context, step int, names []string, at time.Time) (map[string]string, error) {
				t0 := time.Now()
				defer func() { calls = append(calls, time.Since(t0)) }()
				return inner(ctx, step, names, at)
			}
		}
		b.Run(tc.name, func(b *testing.B) {
			var ds []time.Duration
			for b.Loop() {
				t0 := time.Now()
				job := Job{Run: out.Run.Run.ID, Repo: "alice/app", Ref: "refs/heads/main", SHA: strings.Repeat("a", 40),
					WorkflowPath: ".knotless/workflows/ci.yml", WorkflowSource: []byte(tc.src), Workspace: b.TempDir(),
					Logger: slog.New(slog.DiscardHandler), IDTokens: tc.tokens}
				rep := newMemReporter()
				if res := Execute(b.Context(), job, ex, rep); res.State != api.StateSucceeded {
					b.Fatalf("%+v\n%s", res, rep.log(0))
				}
				ds = append(ds, time.Since(t0))
			}
			b.ReportMetric(medianMS(ds), "run-ms")
			if len(calls) > 0 {
				b.ReportMetric(medianMS(calls), "token-ms")
			}
		})
	}
}

func medianMS(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1000
}
