package api

import "time"

// Scheduled runs (issue 38): methods and types added beside the others.
// A schedule is one `on.schedule` entry of a workflow on the repository's
// default branch (docs/workflow.md, "Schedules"); its runs' pipelines have
// the event EventSchedule and the actor ScheduleActor.

const (
	// Q, user (who may see the repository's runs). Params: repo
	// (OWNER/NAME). Out: ScheduleList.
	MethodListSchedules = "dev.knotless.repo.listSchedules"
	// P, user (the repository's owner or an admin). In:
	// PauseScheduleInput. Out: Schedule. 404 NotFound when the repository
	// has no such schedule.
	MethodPauseSchedule = "dev.knotless.repo.pauseSchedule"
)

// EventSchedule is the event of a pipeline a schedule started (Pipeline.Event,
// KNOTLESS_EVENT); ScheduleActor its actor.
const (
	EventSchedule = "schedule"
	ScheduleActor = "schedule"
)

// Schedule is one schedule of a repository.
type Schedule struct {
	ID       int64  `json:"id"`
	Repo     string `json:"repo"`
	Workflow string `json:"workflow"` // path, e.g. .knotless/workflows/nightly.yml
	Cron     string `json:"cron"`     // as written: "0 3 * * *", "@daily"
	TimeZone string `json:"timeZone"` // IANA name; "UTC" by default
	Branch   string `json:"branch"`   // the branch its runs run on (a name, not a ref)
	// NextAt is the next time it starts a run; absent while paused or
	// while Problem says it cannot run.
	NextAt *time.Time `json:"nextAt,omitempty"`
	// LastAt is the due time of the latest run it started, LastPipeline
	// that run's pipeline; absent when none yet.
	LastAt       *time.Time `json:"lastAt,omitempty"`
	LastPipeline int64      `json:"lastPipeline,omitempty"`
	// Problem is why it did not start a run at its latest time or cannot
	// start one (one line, e.g. "branch release does not exist"); absent
	// when it works.
	Problem  string     `json:"problem,omitempty"`
	Paused   bool       `json:"paused,omitempty"`
	PausedBy string     `json:"pausedBy,omitempty"`
	PausedAt *time.Time `json:"pausedAt,omitempty"`
}

// ScheduleList is a repository's schedules, by id, and the server's rules.
type ScheduleList struct {
	Schedules []Schedule `json:"schedules"`
	// MinIntervalSeconds is the shortest time between two runs of one
	// schedule the server allows (knotless-server --schedule-min-interval).
	MinIntervalSeconds int64 `json:"minIntervalSeconds"`
}

// PauseScheduleInput is the body of MethodPauseSchedule: Paused false
// resumes; a resumed schedule's next run is its next time after now (the
// times passed while paused do not run).
type PauseScheduleInput struct {
	Repo   string `json:"repo"`
	ID     int64  `json:"id"`
	Paused bool   `json:"paused"`
}
