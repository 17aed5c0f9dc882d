package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// maxExplainRunners caps the runners explainQueued reads per repository,
// so that a list of runs stays cheap however many runners registered; a
// repository with more is explained from the first ones by name.
const maxExplainRunners = 200

// explainQueued fills the Message of every queued run that has none with
// why it is still waiting (see waitingMessage). The message is computed
// when read, never stored; each repository's runners are read once.
func (s *Server) explainQueued(ctx context.Context, runs []store.Run) error {
	byRepo := map[int64][]store.Runner{}
	now := s.now()
	var queued []int64
	for _, r := range runs {
		if r.State == api.StateQueued && r.Message == "" {
			queued = append(queued, r.ID)
		}
	}
	needs, err := s.store.Needs(ctx, queued)
	if err != nil {
		return err
	}
	for i := range runs {
		r := &runs[i]
		if r.State != api.StateQueued || r.Message != "" {
			continue
		}
		if msg, err := s.waitingForGraph(ctx, *r, needs[r.ID], now); err != nil {
			return err
		} else if msg != "" {
			r.Message = msg
			continue
		}
		if holder, err := s.store.GroupHolder(ctx, *r); err != nil {
			return err
		} else if holder != 0 {
			r.Message = fmt.Sprintf("waiting for run %d to end: it is older in the concurrency group %q", holder, r.ConcurrencyGroup)
			continue
		}
		rs, ok := byRepo[r.RepoID]
		if !ok {
			var err error
			if rs, err = s.store.ListRunners(ctx, r.RepoID, "", maxExplainRunners); err != nil {
				return fmt.Errorf("read runners of %s: %w", r.Repo, err)
			}
			byRepo[r.RepoID] = rs
		}
		r.Message = waitingMessage(*r, rs, now)
	}
	return nil
}

// waitingMessage says, in one short factual line, why queued run has no
// runner yet, given its repository's runners rs: none approved, none
// approved with every entry of the workflow's `runners:`, or the ones that
// qualify are busy or offline (with when they were last seen).
func waitingMessage(run store.Run, rs []store.Runner, now time.Time) string {
	var approved, fits []store.Runner
	var pendingFits []string
	for _, x := range rs {
		switch {
		case x.Status != api.RunnerApproved:
			if qualifies(x, run) {
				pendingFits = append(pendingFits, x.Name)
			}
		case qualifies(x, run):
			fits = append(fits, x)
			approved = append(approved, x)
		default:
			approved = append(approved, x)
		}
	}
	const prefix = "waiting for a runner: "
	awaiting := ""
	if len(pendingFits) > 0 {
		awaiting = fmt.Sprintf("; %s awaits approval (knotless runner approve --repo %s %s)",
			strings.Join(pendingFits, ", "), run.Repo, pendingFits[0])
	}
	switch {
	case len(approved) == 0 && awaiting != "":
		return prefix + run.Repo + " has no approved runner" + awaiting
	case len(approved) == 0:
		return prefix + run.Repo + " has no approved runner (knotless-run login, then knotless runner approve)"
	case len(fits) == 0:
		return fmt.Sprintf("%sno approved runner of %s has all of: %s%s", prefix, run.Repo,
			strings.Join(run.Runners, ", "), awaiting)
	case len(fits) == 1:
		return fmt.Sprintf("%srunner %s qualifies but is busy or offline (%s)", prefix, fits[0].Name, lastSeen(fits[0], now))
	}
	names := make([]string, 0, len(fits))
	latest := fits[0]
	for _, x := range fits {
		names = append(names, x.Name)
		if x.LastSeenAt != nil && (latest.LastSeenAt == nil || x.LastSeenAt.After(*latest.LastSeenAt)) {
			latest = x
		}
	}
	return fmt.Sprintf("%srunners %s qualify but are busy or offline (latest seen: %s, %s)", prefix,
		strings.Join(names, ", "), latest.Name, lastSeen(latest, now))
}

// lastSeen says when x was last heard from: "last seen 5m ago", "never
// seen".
func lastSeen(x store.Runner, now time.Time) string {
	if x.LastSeenAt == nil {
		return "never seen"
	}
	return "last seen " + ago(now.Sub(*x.LastSeenAt)) + " ago"
}

// ago rounds d to one unit: 45s, 5m, 3h, 2d.
func ago(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", max(int(d/time.Second), 0))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}
