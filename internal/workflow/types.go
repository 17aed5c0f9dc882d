package workflow

import "time"

// Dir is where workflows live in a repository.
const Dir = ".knotless/workflows"

// Arches are the values of `arch:`: Linux architectures as Go and
// Kubernetes (the node label kubernetes.io/arch) name them.
var Arches = []string{"amd64", "arm64", "386", "arm", "ppc64le", "s390x", "riscv64"}

// DefaultTimeout is a run's timeout when the workflow sets none.
const DefaultTimeout = time.Hour

// Workflow is one parsed and validated workflow file: one job.
type Workflow struct {
	Path string // as given to Parse, used in messages
	// Name is `name:` or the file name without extension; for a run of a
	// matrix it says the run's values: `name:` with its `{{ matrix.NAME }}`
	// values in place when it has any, else the name followed by the
	// values in parentheses ("test (linux, 1.26)").
	Name string
	// Base is the name without the run's values: what `needs:` calls the
	// workflow (for a matrix whose `name:` holds values, the file name
	// without extension). Name when the workflow has no matrix.
	Base string
	// Matrix is `matrix:` (nil when none) and Combo this run's values of
	// it (nil when none).
	Matrix *Matrix
	Combo  Combo
	// Needs is `needs:`: workflows of the same commit this one waits for
	// (CheckNeeds resolves them).
	Needs []Need
	// Retry is `retry:`; nil: a run is never retried.
	Retry *Retry

	On      Triggers // `on:`
	Runners []string // `runners:`; empty = unlabelled work
	Image   string   // `image:`
	Arch    string   // `arch:`; "" = any
	// ContainerBuilds is `container-builds:`: the job builds container
	// images, and runs only where the runner's operator allowed it
	// (docs/container-builds.md).
	ContainerBuilds bool
	// Services are `services:`, in the file's order.
	Services  []Service
	Env       map[string]string // `env:`
	Secrets   []string          // `secrets:`
	Timeout   time.Duration     // `timeout:`; DefaultTimeout when omitted
	Resources Resources         // `resources:`
	Checkout  Checkout          // `checkout:`; DefaultCheckout when omitted
	Caches    []Cache           // `caches:`
	Outputs   []string          // `outputs:`
	// Concurrency is `concurrency:`; nil means no group.
	Concurrency *Concurrency
	// IDTokens is `id-tokens:`: the id tokens steps may ask for, by name
	// (nil when none).
	IDTokens map[string]IDToken
	Steps    []Step // `steps:`, at least one
}

// Triggers is the `on:` section. A nil field means the event is not wanted.
type Triggers struct {
	Push   *PushTrigger
	Pull   *PullTrigger
	Manual bool
	// Schedule is `on.schedule`: the times the workflow runs on its own
	// (nil when none).
	Schedule []ScheduleTrigger
}

// ScheduleTrigger is one entry of `on.schedule`. Only the entries of the
// workflows on the repository's default branch are kept by the server.
type ScheduleTrigger struct {
	// Cron is the expression as written: five fields (minute hour
	// day-of-month month day-of-week) or a name (@yearly, @annually,
	// @monthly, @weekly, @daily, @midnight, @hourly).
	Cron string
	// TimeZone is the IANA zone the fields are read in; "UTC" when not
	// written.
	TimeZone string
	// Branch is the branch the runs run on, a name without refs/heads/;
	// "" for the repository's default branch.
	Branch string
	// Line and Column are where the entry starts in the file (1-based).
	Line, Column int
}

// PushTrigger selects pushes. Nil Branches means every branch; nil Tags
// means no tags. Patterns are globs (path.Match syntax, `*` within one
// segment, `**` across segments).
type PushTrigger struct {
	Branches []string
	Tags     []string
}

// PullTrigger selects pull requests by target branch (nil = every branch).
type PullTrigger struct {
	Branches []string
}

// Resources are `resources:`; zero values mean the executor's default.
type Resources struct {
	CPUs        string // Kubernetes quantity syntax, e.g. "2", "500m"
	MemoryBytes int64
	DiskBytes   int64
}

// Cache is one entry of `caches:`.
type Cache struct {
	Key         string
	RestoreKeys []string
	Paths       []string
}

// Step is one entry of `steps:`: either Run or Uses is set.
type Step struct {
	Name    string // `name:`, default "step N" or the uses path
	Run     string // `run:` script
	Shell   string // `shell:`, e.g. "bash -eo pipefail"; empty = /bin/sh -e
	Env     map[string]string
	Secrets []string
	// IDTokens is the step's `id-tokens:`: names of the workflow's
	// id-tokens the step gets, each as a variable of that name.
	IDTokens        []string
	Timeout         time.Duration // 0 = bounded by the run's timeout only
	ContinueOnError bool
	// Detach is `detach: true`: the step (a service: a database, a
	// server) keeps running beside the steps after it and is stopped at
	// the run's end; see docs/workflow.md, "Services".
	Detach bool
	Uses   string            // `uses:` shared step directory
	With   map[string]string // `with:`
}

// Event is what happened to a repository.
type Event struct {
	Kind string // EventPush, EventManual or EventPull
	// Ref is the full ref: refs/heads/NAME for branches, refs/tags/NAME for
	// tags (EventPush), the target branch ref for EventPull.
	Ref string
}

// Event kinds.
const (
	EventPush   = "push"
	EventManual = "manual"
	EventPull   = "pull"
	// EventSchedule: a schedule's due time (Ref is the branch it runs on).
	EventSchedule = "schedule"
)
