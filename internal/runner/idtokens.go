package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/workflow"
)

// IDTokenFunc asks the server for the id tokens names of step (1-based)
// of the job's run, issued at issuedAt (the step's start), and returns
// their values by name. The same arguments give the same values: a
// process that took the run over asks again to mask them. The values are
// secrets: they go to the step like a secret, into no file, argument or
// log.
type IDTokenFunc func(ctx context.Context, step int, names []string, issuedAt time.Time) (map[string]string, error)

// errNoIssuer: the job has no server to sign id tokens (knotless-run exec).
var errNoIssuer = errors.New("id tokens are signed by a Knotless server, and knotless-run exec has none")

// ServerIDTokens is the IDTokenFunc of a run claimed from a server: it
// calls api.MethodIDTokens, trying again a few times while the server is
// unreachable (maxBackoff caps the waits).
func ServerIDTokens(client *api.RunnerClient, run int64, maxBackoff time.Duration) IDTokenFunc {
	return func(ctx context.Context, step int, names []string, issuedAt time.Time) (map[string]string, error) {
		in := api.IDTokensInput{Run: run, Step: step, Names: names, IssuedAt: issuedAt.UTC()}
		var out api.IDTokensOutput
		var err error
		for attempt := 0; ; attempt++ {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			out, err = client.IDTokens(cctx, in)
			cancel()
			if err == nil || !api.Retryable(err) || attempt == 5 || ctx.Err() != nil {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(api.RetryWait(attempt, err, maxBackoff)):
			}
		}
		if err != nil {
			return nil, err
		}
		vals := make(map[string]string, len(out.Tokens))
		for _, t := range out.Tokens {
			vals[t.Name] = t.Token
		}
		for _, n := range names {
			if vals[n] == "" {
				return nil, fmt.Errorf("the server sent no id token %s", n)
			}
		}
		return vals, nil
	}
}

// idTokens gets the id tokens step idx lists, issued at at, and masks
// them in every log written from now on (the step's, the later steps').
// errNoIssuer when the job has no server.
func (e *execution) idTokens(ctx context.Context, idx int, st workflow.Step, at time.Time) (map[string]string, error) {
	if len(st.IDTokens) == 0 {
		return nil, nil
	}
	if e.job.IDTokens == nil {
		return nil, errNoIssuer
	}
	vals, err := e.job.IDTokens(ctx, idx, st.IDTokens, at)
	if err != nil {
		return nil, fmt.Errorf("id token %s: %w", strings.Join(st.IDTokens, ", "), err)
	}
	for _, v := range vals {
		if v != "" && !slices.Contains(e.secrets, v) {
			e.secrets = append(e.secrets, v)
		}
	}
	return vals, nil
}

// stepTokens gets the id tokens of a step about to start, for buildStep.
// Without a server (exec) the step runs without them, saying so in its
// log; when the server gives none the step must not run: it ends
// errored/id-token with the returned update and result.
func (e *execution) stepTokens(ctx context.Context, idx int, st workflow.Step, name string, at time.Time) (map[string]string, *StepUpdate, Result) {
	vals, err := e.idTokens(ctx, idx, st, at)
	switch {
	case err == nil:
		return vals, nil, Result{}
	case errors.Is(err, errNoIssuer):
		e.setup.printf("step %d (%s) lists id tokens (%s), but %v: the step runs without them\n", idx, name, strings.Join(st.IDTokens, ", "), errNoIssuer)
		return nil, nil, Result{}
	}
	msg := fmt.Sprintf("step %d (%s) did not run: the server gave no %v", idx, name, err)
	e.setup.printf("%s\n", msg)
	return nil, &StepUpdate{Step: idx, Name: name, State: api.StepErrored, Reason: api.ReasonIDToken},
		Result{State: api.StateErrored, Reason: api.ReasonIDToken, Message: msg}
}

// remaskIDTokens asks again, on a run taken over, for the id tokens of
// every step an earlier process started (the server signs the same bytes
// for the same start), so that the logs written from now on mask them
// too: a step still running, or a later one, may print one.
func (e *execution) remaskIDTokens(ctx context.Context) {
	if e.job.IDTokens == nil {
		return
	}
	for i, st := range e.wf.Steps {
		at, ok := e.past.stepStarted[i+1]
		if !ok || len(st.IDTokens) == 0 {
			continue
		}
		if _, err := e.idTokens(ctx, i+1, st, at); err != nil {
			e.setup.printf("warning: step %d's %v could not be asked again: the logs from here on may show it unmasked\n", i+1, err)
		}
	}
}
