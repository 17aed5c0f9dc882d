package store

import "time"

// Scheduled runs (issue 38): the types of the Store methods at the end of
// its interface. A schedule is one `on.schedule` entry of a workflow on the
// repository's default branch; the server keeps one row per entry and
// fires it by moving NextAt forward in the transaction that creates the
// run's pipeline, so each due time starts one pipeline on one replica.

// ScheduleKey names one schedule of a repository: the same key in a new
// push of the default branch is the same schedule (keeping its NextAt,
// pause and history); a changed expression, zone or branch is a new one.
type ScheduleKey struct {
	Workflow string // path of the workflow file, e.g. .knotless/workflows/nightly.yml
	Cron     string // the expression as written, e.g. "0 3 * * *" or "@daily"
	TimeZone string // IANA name, "UTC" by default
	Branch   string // branch name (not a ref); "" is the default branch
}

// NewSchedule is one schedule as SyncSchedules wants it.
type NewSchedule struct {
	ScheduleKey
	// NextAt is the first due time to fire if the schedule is new (an
	// existing schedule keeps its own).
	NextAt time.Time
	// Problem is why it cannot fire now, e.g. it fires more often than the
	// server allows; "" when it can. It replaces the stored one.
	Problem string
}

// Schedule is a stored schedule.
type Schedule struct {
	ID     int64
	RepoID int64
	Repo   string // OWNER/NAME
	ScheduleKey
	// NextAt is the next due time not yet fired (or skipped).
	NextAt time.Time
	// LastAt is the due time of the latest pipeline the schedule started,
	// LastPipelineID that pipeline; nil and 0 when none yet.
	LastAt         *time.Time
	LastPipelineID int64
	// Problem is why the schedule's latest due time did not start a run
	// (e.g. "branch release does not exist"), or why it cannot fire; ""
	// when its latest firing worked.
	Problem  string
	Paused   bool
	PausedBy string     // handle of who paused it
	PausedAt *time.Time // when
	// CreatedAt is when the schedule first appeared on the default branch.
	CreatedAt time.Time
}

// ScheduleFire makes CreatePipeline fire a schedule in its transaction:
// the pipeline is created only if schedule ID's NextAt is still Expected
// (as DueSchedules read it), and NextAt becomes Next, LastAt Due,
// LastPipelineID the new pipeline and Problem "". Otherwise
// CreatePipeline creates nothing and returns ErrConflict (errors.Is):
// another replica fired (or skipped) that time already, or the schedule
// is paused, removed, or not of NewPipeline.RepoID. Replicas racing to
// fire one time start one pipeline; a fire whose transaction never
// commits leaves the time due.
type ScheduleFire struct {
	ID       int64
	Expected time.Time // the NextAt read
	Due      time.Time // the due time fired (the latest one not after now)
	Next     time.Time // the next due time after now
}
