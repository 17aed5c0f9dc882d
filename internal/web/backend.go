package web

import (
	"context"
	"net/http"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/pipegraph"
)

// Viewer is the signed-in account a page is shown to.
type Viewer struct {
	AccountID int64
	Handle    string
	Admin     bool
}

// Session is a signed-in browser.
type Session struct {
	ID        string // the cookie's value; only its hash is stored
	CSRF      string // the form token every POST of this session carries
	Viewer    Viewer
	ExpiresAt time.Time
}

// Pipeline is one row of the Pipelines tab.
type Pipeline struct {
	ID        int64
	Ref       string // full ref, e.g. refs/heads/main
	SHA       string
	Subject   string // the commit message's first line ("" when unknown)
	Event     string // push, tag, manual
	Actor     string // who pushed, triggered or re-ran
	CreatedAt time.Time
	Notes     []string // api.Pipeline.Notes
	RerunOf   int64    // api.Pipeline.RerunOf
	// Runs are by id, without steps: those the query's state and
	// workflow select; Hidden counts the others.
	Runs   []api.Run
	Hidden int
	// CanRerunFailed: the viewer may re-run runs of the repository, every
	// run of the pipeline ended and one did not succeed.
	CanRerunFailed bool
}

// Stages lays the pipeline's runs out as its graph (pipegraph.Layout):
// stage by stage, each a list of workflow groups. Runs the filters hide
// are left out of it.
func (p Pipeline) Stages() [][]pipegraph.Group {
	var out [][]pipegraph.Group
	for _, g := range pipegraph.Layout(p.Runs) {
		if len(out) < g.Stage {
			out = append(out, make([][]pipegraph.Group, g.Stage-len(out))...)
		}
		out[g.Stage-1] = append(out[g.Stage-1], g)
	}
	return out
}

// PipelineQuery selects a page of a repository's Pipelines tab. Zero
// fields do not filter.
type PipelineQuery struct {
	Before int64 // pipelines with a smaller id (0: from the newest)
	Limit  int
	Branch string // a branch's name (main), or a full ref (refs/tags/v1)
	Commit string // a full commit id
	// State and Workflow select pipelines with such a run (a run with
	// both, when both are set), and show only such runs.
	State    string
	Workflow string
}

// PipelinePage is one page of a repository's pipelines, newest first.
type PipelinePage struct {
	Repo      string // OWNER/NAME
	Pipelines []Pipeline
	// Older, when not 0, is the "before" of the next (older) page.
	Older int64
	// Branches and Workflows are what the filters offer: the
	// repository's branches (most recent commit first) and the workflows
	// of its recent runs (by name).
	Branches  []string
	Workflows []string
}

// Step is a step of a run with its timing. Started and Ended are nil when
// unknown (not started, not ended).
type Step struct {
	api.Step
	Started, Ended *time.Time
	// Done: the step's log will not grow (the step or the run is over).
	Done bool
}

// Run is what the run page shows.
type Run struct {
	api.Run
	Steps []Step
	// Outputs is the first page of the outputs archive's entries (nil: the
	// run stored no outputs); Run.Outputs has the archive's totals.
	Outputs []api.OutputEntry
	// CanCancel: the viewer may cancel the run, and it is not over.
	CanCancel bool
	// CanRerun: the viewer may re-run runs of the repository, and this
	// one is over.
	CanRerun bool
	// Expired is when retention removed the run's logs and outputs (nil:
	// kept); the page says so in their place.
	Expired *time.Time
}

// Runner is one row of the Runners tab.
type Runner struct {
	api.Runner
	Executor string // what its latest process said ("" before its first)
	Version  string // knotless-run's version, likewise
	Digest   string // SHA-256 of its executable, likewise
	Capacity int    // runs it takes at once, likewise (0: unknown)
	// Facts are what its executor said of where runs go (a kube runner's
	// namespace and pod), by name.
	Facts  []Fact
	Online bool      // heard from within Backend's online window
	Held   []api.Run // the runs it holds (claimed or running), by id
}

// Fact is one of a runner's facts.
type Fact struct{ Name, Value string }

// RunnersPage is a repository's Runners tab.
type RunnersPage struct {
	Repo    string
	Runners []Runner
}

// Backend is everything the pages read and change, with the API's rules
// for who may do what: a method refuses what the XRPC method it mirrors
// refuses, with the same *api.Error (401, 403, 404, 409). Methods are safe
// for concurrent use; a cancelled ctx ends them.
type Backend interface {
	// SignIn makes a session from an account API token: an *api.Error 401
	// when the token is unknown, revoked, expired or its account disabled.
	SignIn(ctx context.Context, token string) (Session, error)
	// Session returns the session of a cookie value; an *api.Error 401
	// when it is unknown, signed out, expired, or its token no longer
	// valid.
	Session(ctx context.Context, id string) (Session, error)
	// SignOut ends a session (idempotent).
	SignOut(ctx context.Context, id string) error

	// Repos lists the repositories the viewer may see.
	Repos(ctx context.Context, v Viewer) ([]api.Repo, error)
	// Pipelines returns a page of repo's (OWNER/NAME) pipelines as q
	// selects them.
	Pipelines(ctx context.Context, v Viewer, repo string, q PipelineQuery) (PipelinePage, error)
	// Run returns run id with its steps, as dev.knotless.run.get does.
	Run(ctx context.Context, v Viewer, id int64) (Run, error)
	// RunChanged returns a channel closed at the run's next change (its
	// state, a step, log bytes). It checks nothing: call Run first.
	RunChanged(id int64) <-chan struct{}
	// Closing is closed when the server shuts down: event streams end (and
	// browsers reconnect to the next server).
	Closing() <-chan struct{}
	// ReadLog returns bytes [from, to) of a step's log (fewer when the log
	// is shorter).
	ReadLog(ctx context.Context, v Viewer, run int64, step int, from, to int64) ([]byte, error)
	// LineTimes returns the line times of a step's log with offsets in
	// [from, to) and the last one below from, first (api.LineTime: when
	// the runner saw each line begin); none for a log without.
	LineTimes(ctx context.Context, v Viewer, run int64, step int, from, to int64) ([]api.LineTime, error)
	// ServeLog answers r with a step's whole log (application/octet-stream),
	// as dev.knotless.run.getLog does; false (nothing written) with the
	// error when the viewer may not read it.
	ServeLog(w http.ResponseWriter, r *http.Request, v Viewer, run int64, step int) error
	// ServeOutputs answers r with the run's outputs archive (tar), as
	// dev.knotless.run.getOutputs does.
	ServeOutputs(w http.ResponseWriter, r *http.Request, v Viewer, run int64) error
	// CancelRun cancels a run as dev.knotless.run.cancel does.
	CancelRun(ctx context.Context, v Viewer, id int64) error
	// Rerun runs again a final run (in.Run) or the runs of an ended
	// pipeline that did not succeed (in.Pipeline), as
	// dev.knotless.run.rerun does, and returns the new pipeline.
	Rerun(ctx context.Context, v Viewer, in api.RerunInput) (api.Pipeline, error)

	// Runners lists repo's runners with what they hold.
	Runners(ctx context.Context, v Viewer, repo string) (RunnersPage, error)
	// ApproveRunner approves runner name of repo if its DID is did, as
	// dev.knotless.runner.approve does (409 when the DID differs).
	ApproveRunner(ctx context.Context, v Viewer, repo, name, did string) error
	// RemoveRunner removes runner name of repo.
	RemoveRunner(ctx context.Context, v Viewer, repo, name string) error

	// Usage returns what repo's runs and caches use and its retention,
	// as dev.knotless.repo.usage does.
	Usage(ctx context.Context, v Viewer, repo string) (api.RepoUsage, error)

	// Schedules returns repo's schedules and the server's shortest
	// interval, as dev.knotless.repo.listSchedules does.
	Schedules(ctx context.Context, v Viewer, repo string) (api.ScheduleList, error)
	// PauseSchedule pauses (in.Paused) or resumes a schedule and returns
	// it, as dev.knotless.repo.pauseSchedule does (404 for no such
	// schedule of in.Repo).
	PauseSchedule(ctx context.Context, v Viewer, in api.PauseScheduleInput) (api.Schedule, error)
}
