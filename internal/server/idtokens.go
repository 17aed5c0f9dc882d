package server

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/oidc"
	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/workflow"
)

// maxIssueSkew is how far a step's start (IDTokensInput.IssuedAt) may be
// ahead of the server's clock, or before the run's claim.
const maxIssueSkew = time.Minute

// idTokens answers MethodIDTokens: the id tokens a step lists, for the
// runner that holds the run's lease. Everything in them but the audience
// and the lifetime (the workflow's, as stored with the run) comes from the
// server's record of the run; the runner chooses only which step and when
// it started. No token is stored or logged: the same input signs the same
// bytes again (oidc.Issuer.Sign).
func (s *Server) idTokens(w http.ResponseWriter, r *http.Request, x store.Runner) error {
	ctx := r.Context()
	var in api.IDTokensInput
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	if len(in.Names) == 0 {
		return badRequest("names is required: the id tokens the step lists")
	}
	if len(in.Names) > 64 {
		return badRequest("names lists %d id tokens; a step lists at most 64", len(in.Names))
	}
	run, err := s.heldRun(ctx, x, in.Run)
	if err != nil {
		return err
	}
	now := time.Now()
	switch {
	case api.IsFinal(run.State):
		return runFinished(run)
	case run.LeaseExpires == nil || !run.LeaseExpires.After(now):
		return forbidden("the lease of run %d by runner %s has lapsed: no id token", run.ID, x.Name)
	}
	iat := in.IssuedAt
	if iat.IsZero() {
		iat = now
	}
	iat = iat.Truncate(time.Second)
	if iat.After(now.Add(maxIssueSkew)) {
		return badRequest("issuedAt %s is ahead of the server's clock (%s): check the runner's clock", iat.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if run.ClaimedAt != nil && iat.Before(run.ClaimedAt.Add(-maxIssueSkew)) {
		return badRequest("issuedAt %s is before run %d was claimed", iat.UTC().Format(time.RFC3339), run.ID)
	}
	src, err := s.store.RunSource(ctx, run.ID)
	if err != nil {
		return err
	}
	wf, err := workflow.Parse(run.WorkflowPath, []byte(src))
	if err != nil {
		return badRequest("the workflow of run %d does not parse: %v", run.ID, err)
	}
	if in.Step < 1 || in.Step > len(wf.Steps) {
		return badRequest("step %d: run %d has steps 1 to %d", in.Step, run.ID, len(wf.Steps))
	}
	st := wf.Steps[in.Step-1]
	for _, n := range in.Names {
		if !slices.Contains(st.IDTokens, n) {
			return forbidden("step %d of run %d does not list id token %q in its id-tokens", in.Step, run.ID, n)
		}
	}
	base, err := s.runClaims(ctx, run)
	if err != nil {
		return err
	}
	out := api.IDTokensOutput{Tokens: make([]api.IDToken, 0, len(in.Names))}
	kids := make([]string, 0, len(in.Names))
	for _, n := range in.Names {
		def := wf.IDTokens[n]
		life := min(def.Lifetime, wf.Timeout, oidc.MaxLifetime)
		c := base
		c.Audience = oidc.Audience(def.Audience)
		if len(c.Audience) == 0 {
			c.Audience = oidc.Audience{s.cfg.URL}
		}
		c.IssuedAt = iat.Unix()
		c.NotBefore = iat.Add(-oidc.ClockSkew).Unix()
		c.ExpiresAt = iat.Add(life).Unix()
		c.ID = oidc.TokenID(s.cfg.URL, run.ID, in.Step, n, c.IssuedAt)
		tok, kid, err := s.issuer.Sign(c, now)
		if err != nil {
			return err
		}
		out.Tokens = append(out.Tokens, api.IDToken{Name: n, Token: tok, ExpiresAt: time.Unix(c.ExpiresAt, 0).UTC()})
		kids = append(kids, kid)
	}
	s.log.Info("id tokens issued", "run", run.ID, "step", in.Step, "names", strings.Join(in.Names, ","),
		"subject", base.Subject, "kid", strings.Join(slices.Compact(kids), ","), "runner", x.Name)
	return writeJSON(w, out)
}

// runClaims are the claims of every id token of run, from the server's
// record of it: all but the audience and the times.
func (s *Server) runClaims(ctx context.Context, run store.Run) (oidc.Claims, error) {
	owner, _, _ := strings.Cut(run.Repo, "/")
	canPush, err := s.canPush(ctx, run)
	if err != nil {
		return oidc.Claims{}, err
	}
	return oidc.Claims{
		Issuer:          s.cfg.URL,
		Subject:         oidc.Subject(run.Repo, run.Ref, run.Event),
		Repository:      run.Repo,
		RepositoryID:    strconv.FormatInt(run.RepoID, 10),
		RepositoryOwner: owner,
		Ref:             run.Ref,
		RefType:         oidc.RefType(run.Ref),
		SHA:             run.SHA,
		Workflow:        run.Workflow,
		WorkflowPath:    run.WorkflowPath,
		Event:           run.Event,
		Actor:           run.Actor,
		ActorCanPush:    canPush,
		RunID:           strconv.FormatInt(run.ID, 10),
		PipelineID:      strconv.FormatInt(run.PipelineID, 10),
		Runner:          run.RunnerName,
	}, nil
}

// canPush reports whether the account that started run may push to its
// repository, as git's receive-pack decides (canManage: its owner, or an
// admin) and its account is enabled. A pull from another account, or an
// actor since deleted, cannot.
func (s *Server) canPush(ctx context.Context, run store.Run) (bool, error) {
	if run.Event == workflow.EventPull || run.Actor == "" {
		return false, nil
	}
	a, err := s.store.AccountByHandle(ctx, run.Actor)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	repo, err := s.store.RepoByID(ctx, run.RepoID)
	if err != nil {
		return false, err
	}
	return !a.Disabled && canManage(a, repo), nil
}
