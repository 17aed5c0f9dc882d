package store

import (
	"context"
	"errors"
	"time"

	"knotless.dev/knotless/internal/api"
)

// Errors every implementation returns (possibly wrapped; test with errors.Is).
var (
	// ErrNotFound: the named account, repository, run, runner or secret
	// does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a unique name is taken, or a compare-and-set lost (the
	// run was no longer in the state the operation expected).
	ErrConflict = errors.New("conflict")
	// ErrRunFinished: the run is already in a final state and the operation
	// would change it.
	ErrRunFinished = errors.New("run already finished")
	// ErrLimit: the operation would pass a limit the caller gave (e.g.
	// RegisterRunner's maxPending).
	ErrLimit = errors.New("limit reached")
	// ErrTokenExpired: AccountByToken found the token, but it expired.
	ErrTokenExpired = errors.New("token expired")
	// ErrAccountDisabled: AccountByToken found the token, but an admin
	// disabled its account.
	ErrAccountDisabled = errors.New("account disabled")
	// ErrBusy: a transaction kept colliding with others (PostgreSQL's
	// serialization failures or deadlocks) through every retry; the same
	// call made again later may succeed.
	ErrBusy = errors.New("database busy: the transaction kept colliding with others")
)

// Account is a user of the server.
type Account struct {
	ID     int64
	Handle string
	DID    string
	Admin  bool
	// Disabled: an admin disabled the account; its tokens are refused.
	Disabled  bool
	CreatedAt time.Time
}

// Token is one named API token of an account. Only its hash is stored.
type Token struct {
	ID         int64
	AccountID  int64
	Name       string // unique per account
	Hash       string // SHA-256 hex of the token
	CreatedAt  time.Time
	ExpiresAt  *time.Time // nil: never
	LastUsedAt *time.Time // nil: never used (recorded at most once a TokenTouchInterval)
}

// TokenTouchInterval is how stale a token's LastUsedAt may get before
// AccountByToken writes it again: a token in constant use costs one write
// a minute, not one per request.
const TokenTouchInterval = time.Minute

// InitialTokenName names the token CreateAccount makes.
const InitialTokenName = "initial"

// Repo is a repository OWNER/NAME.
type Repo struct {
	ID        int64
	OwnerID   int64
	Owner     string // the owner's handle
	Name      string
	CreatedAt time.Time
}

// FullName returns "OWNER/NAME".
func (r Repo) FullName() string { return r.Owner + "/" + r.Name }

// Pipeline is the set of runs made by one trigger.
type Pipeline struct {
	ID     int64
	RepoID int64
	Repo   string // OWNER/NAME
	Ref    string // full ref, e.g. refs/heads/main
	SHA    string // commit
	Event  string // push, tag, manual
	// BeforeSHA is the commit the ref pointed at before the push; "" for a
	// new ref or a manual trigger.
	BeforeSHA string
	Actor     string // handle of the account that pushed or triggered
	CreatedAt time.Time
	// Notes are what people should read about the pipeline besides its
	// runs, one line each (e.g. a file in .knotless/workflows that is not
	// a workflow and did not run).
	Notes []string
	// RerunOf is the pipeline whose runs this one runs again; 0 when none.
	RerunOf int64
}

// Run is one workflow executing once for one pipeline. Ref, SHA and Event
// come from its pipeline; Repo and RepoOwnerID from its repository.
type Run struct {
	ID           int64
	PipelineID   int64
	RepoID       int64
	RepoOwnerID  int64
	Repo         string // OWNER/NAME
	Ref          string
	SHA          string
	Event        string
	BeforeSHA    string   // the pipeline's
	Actor        string   // the pipeline's
	Notes        []string // the pipeline's
	RerunOf      int64    // the pipeline's
	Workflow     string   // the workflow's name
	WorkflowPath string   // relative to the repository root
	Secrets      []string // workflow-level `secrets:` names
	Runners      []string // workflow-level `runners:` entries
	State        string
	Reason       string
	Message      string
	ExitCode     *int
	RunnerID     int64 // 0 until claimed
	RunnerName   string
	// CancelRequested is set when a user cancelled a claimed or running run;
	// the runner learns it from its next heartbeat.
	CancelRequested bool
	CreatedAt       time.Time
	ClaimedAt       *time.Time
	StartedAt       *time.Time
	FinishedAt      *time.Time
	LeaseExpires    *time.Time
	// ConcurrencyGroup is the run's expanded `concurrency:` group; ""
	// for none. A run with a group is claimed only when no older run of
	// its repository and group is still queued, claimed or running.
	ConcurrencyGroup string
	// SupersededBy is the newer run of the group that cancelled this one
	// (cancel-in-progress); 0 when none.
	SupersededBy int64
	// Matrix is the run's values of its workflow's `matrix:`; nil when
	// it has none. FailFast is the matrix's `fail-fast`.
	Matrix   []api.MatrixValue
	FailFast bool
	// Attempt counts from 1; a retry (a new run) of a run that ended
	// errored for its environment has RetryOf set to it, which then has
	// RetriedBy set to the retry. RetryMax and RetryWhen are the
	// workflow's `retry:` (0 and nil: none).
	Attempt   int
	RetryOf   int64
	RetriedBy int64
	RetryMax  int
	RetryWhen []string
	// Services is how many services the workflow lists (`services:`): a
	// runner whose executor runs no images does not claim such a run.
	Services int
	// Timeout is the workflow's `timeout:`: how long after its start
	// every executor has stopped the run's environment, also when its
	// runner is gone.
	Timeout time.Duration
	// EnvGoneAt is when the run's environment is known to be gone: when
	// its runner reported it removed, or, for a run whose runner was
	// lost, when the run's timeout (plus EnvGrace) has passed since its
	// start. Nil while unknown. A retry of the run is not claimed before.
	EnvGoneAt *time.Time
	// Exports are the values the run's steps exported (RunFinal.Exports).
	Exports map[string]string
	// Followups are the other runs that ending this one changed, in
	// their new state: the runs that needed it, skipped; its matrix
	// siblings, cancelled (fail-fast); its next attempt, queued. Only a
	// run as a call that ended it returns it has them (CompleteRun,
	// CancelRun, ExpireLeases, RemoveRunner, EnvironmentsGone).
	Followups []Run
}

// EnvGrace is what a lost run's environment is given past the run's
// timeout before it counts as gone (Run.EnvGoneAt): the executors'
// SIGTERM-to-SIGKILL wait and the removal of a pod or container.
const EnvGrace = time.Minute

// Need is one run another run waits for: Run's id, and the entry of the
// waiting run's `needs:` (Name) that named Run's workflow.
type Need struct {
	Run  int64
	Name string
}

// NewNeed is a need of a run to create: Index is the needed run's index
// in NewPipeline.Runs.
type NewNeed struct {
	Index int
	Name  string
}

// Step is one step of a run; index 0 is the setup log.
type Step struct {
	Index     int
	Name      string
	State     string
	ExitCode  *int
	Reason    string
	UpdatedAt time.Time
	// StartedAt is when the step started running; FinishedAt when it
	// ended (a final state other than skipped). Nil while unknown. An
	// UpdateStep sets each once: the first running update sets StartedAt
	// (from At), the first final one FinishedAt.
	StartedAt  *time.Time
	FinishedAt *time.Time
	// At is when the change happened, as the runner measured it (for
	// UpdateStep; zero means UpdatedAt).
	At time.Time
}

// NewRun is a run to create with its pipeline. State is queued, or a final
// state for a run that cannot start (a workflow that failed to parse); Steps
// are rows to create with it (e.g. the failed setup step).
type NewRun struct {
	Workflow     string
	WorkflowPath string
	Source       string // the workflow file's bytes at the pipeline's commit
	// ConcurrencyGroup is the run's expanded concurrency group ("" for
	// none). With CancelInProgress, creating the run cancels the older
	// runs of its repository and group that have not ended (in the same
	// transaction): queued ones end cancelled/superseded at once, claimed
	// and running ones get a cancel request and end cancelled/superseded
	// when their runner reports.
	ConcurrencyGroup string
	CancelInProgress bool
	Secrets          []string
	Runners          []string
	State            string
	Reason           string
	Message          string
	Steps            []Step
	// Matrix, FailFast, RetryMax, RetryWhen, Services and Timeout are
	// Run's.
	Matrix    []api.MatrixValue
	FailFast  bool
	RetryMax  int
	RetryWhen []string
	Services  int
	Timeout   time.Duration
	// Needs are the runs of the same pipeline this one waits for: it is
	// claimed only once all of them succeeded, and ends skipped
	// (need-failed) as soon as one of them ends otherwise for good.
	Needs []NewNeed
}

// NewPipeline is a pipeline to create, with all its runs, in one transaction.
type NewPipeline struct {
	RepoID    int64
	Ref       string
	SHA       string
	Event     string
	BeforeSHA string // see Pipeline
	Actor     string
	CreatedAt time.Time
	Notes     []string // see Pipeline
	RerunOf   int64    // see Pipeline
	Runs      []NewRun
	// Schedule, when set, fires a schedule in the same transaction (see
	// ScheduleFire); Event is then "schedule".
	Schedule *ScheduleFire
}

// RunFilter selects runs for ListRuns. Zero fields do not filter. Limit 0
// means 50.
type RunFilter struct {
	RepoID     int64
	PipelineID int64
	OwnerID    int64 // only runs of repositories this account owns
	// Before, when set, lists only runs with a smaller id: the next page
	// after a page whose last run had that id.
	Before int64
	Limit  int
}

// Claim is what ClaimRun records on a queued run.
type Claim struct {
	RunnerID   int64
	RunnerName string
	// Session, when set, must be the runner's current session, not handed
	// over, for the claim to succeed (else ErrConflict): a process whose
	// session was superseded while it long-polled claims nothing.
	Session    string
	TokenHash  string // SHA-256 hex of the run token
	Now        time.Time
	LeaseUntil time.Time
}

// RunFinal is the final result of a run.
type RunFinal struct {
	State    string // a final state
	Reason   string
	Message  string
	ExitCode *int
	At       time.Time
	// Exports are the values the run exported, stored with the result.
	Exports map[string]string
	// EnvironmentRemoved: the runner removed the run's environment before
	// it reported (EnvGoneAt is At).
	EnvironmentRemoved bool
}

// Runner is a registered runner identity of one repository.
type Runner struct {
	ID         int64
	RepoID     int64
	Repo       string // OWNER/NAME
	Name       string
	DID        string
	PublicKey  string // multibase
	Labels     []string
	Status     string // pending, approved
	CreatedAt  time.Time
	LastSeenAt *time.Time
	// Session is the runner's current session ("" before its first
	// StartSession), started at SessionStartedAt.
	Session          string
	SessionStartedAt *time.Time
	// HandedOverAt and HandoverUntil are set once Session handed its runs
	// over (HandOver; the session is ended) until the next StartSession:
	// when it did, and until when its runs wait for the next session.
	HandedOverAt  *time.Time
	HandoverUntil *time.Time
}

// SessionOpen reports whether session is the runner's current session and
// has not handed its runs over: the one session whose calls are served.
func (x Runner) SessionOpen(session string) bool {
	return session != "" && session == x.Session && x.HandedOverAt == nil
}

// Secret is a stored secret of a repository. Ciphertext is filled only by
// SecretsFor; ListSecrets leaves it nil.
type Secret struct {
	RepoID     int64
	Name       string
	Runner     string // "" = every runner of the repository
	Ciphertext []byte
	UpdatedAt  time.Time
}

// Outputs describes a run's stored outputs archive (the file itself is the
// server's, under its data directory).
type Outputs struct {
	RunID    int64
	Size     int64  // the archive's length in bytes
	SHA256   string // hex SHA-256 of the archive
	Entries  int    // files, directories and symbolic links in it
	Bytes    int64  // total size of its regular files
	StoredAt time.Time
}

// OutputEntry is one entry of a run's outputs archive.
type OutputEntry struct {
	Path   string // slash path relative to the checkout; unique per run
	Kind   string // "file", "dir" or "symlink" (api.Output*)
	Size   int64  // bytes of a file
	Mode   uint32 // permission bits
	Target string // a symbolic link's target
}

// RegistrationToken is an owner's consent that runners may register for
// one repository: short-lived, with a number of uses. Only its hash is
// stored.
type RegistrationToken struct {
	Hash      string // SHA-256 hex of the token
	RepoID    int64
	Repo      string // OWNER/NAME (read only)
	CreatedBy string // handle of the account that made it
	UsesLeft  int
	ExpiresAt time.Time
	CreatedAt time.Time
}

// Store is everything the server keeps in its database. Every method is safe
// for concurrent use; a cancelled ctx aborts the call and rolls back any
// transaction it had begun. Times are stored with millisecond precision.
type Store interface {
	// CreateAccount creates an account whose API token hashes to tokenHash
	// (SHA-256 hex). ErrConflict when the handle or DID is taken.
	CreateAccount(ctx context.Context, a Account, tokenHash string) (Account, error)
	// AccountByHandle: ErrNotFound when there is none.
	AccountByHandle(ctx context.Context, handle string) (Account, error)
	// AccountByToken returns the account whose token hashes to tokenHash
	// and records the token's use (see TokenTouchInterval). ErrNotFound
	// when there is none (never was, or revoked), ErrTokenExpired when it
	// expired by now, ErrAccountDisabled when its account is disabled.
	AccountByToken(ctx context.Context, tokenHash string, now time.Time) (Account, error)
	// SetAccountDisabled disables or enables the account handle and
	// returns it; ErrNotFound when there is none.
	SetAccountDisabled(ctx context.Context, handle string, disabled bool) (Account, error)

	// CreateToken adds a named token to an account. ErrConflict when the
	// account has a token of that name; ErrLimit when it has max tokens
	// already (max <= 0: no limit).
	CreateToken(ctx context.Context, t Token, max int) (Token, error)
	// ListTokens lists an account's tokens by name.
	ListTokens(ctx context.Context, accountID int64) ([]Token, error)
	// DeleteToken removes an account's token by name, effective for the
	// next AccountByToken. ErrNotFound when there is none; ErrLimit when it
	// is the account's last token and keepLast is set.
	DeleteToken(ctx context.Context, accountID int64, name string, keepLast bool) error

	// CreateRepo: ErrConflict when the owner already has a repository of
	// that name.
	CreateRepo(ctx context.Context, ownerID int64, name string, now time.Time) (Repo, error)
	// RepoByName looks up OWNER/NAME; ErrNotFound when absent.
	RepoByName(ctx context.Context, owner, name string) (Repo, error)
	RepoByID(ctx context.Context, id int64) (Repo, error)
	// ListRepos lists repositories of ownerID (0 = all), by full name.
	ListRepos(ctx context.Context, ownerID int64) ([]Repo, error)

	// CreatePipeline creates a pipeline and its runs (and their initial
	// steps) atomically and returns them, runs in the order given.
	CreatePipeline(ctx context.Context, p NewPipeline) (Pipeline, []Run, error)
	// Pipeline: ErrNotFound when absent.
	Pipeline(ctx context.Context, id int64) (Pipeline, error)
	// Run: ErrNotFound when absent.
	Run(ctx context.Context, id int64) (Run, error)
	// RunSource returns the workflow file's bytes stored with the run.
	RunSource(ctx context.Context, id int64) (string, error)
	// Steps lists a run's step rows by index (possibly none).
	Steps(ctx context.Context, runID int64) ([]Step, error)
	// ListRuns lists runs newest first.
	ListRuns(ctx context.Context, f RunFilter) ([]Run, error)
	// QueuedRuns lists the queued runs of a repository that may be
	// claimed now, oldest first: it leaves out those an older run of their
	// concurrency group holds back, those whose needs have not all
	// succeeded, and retries whose previous attempt's environment is not
	// known to be gone (Run.EnvGoneAt, compared with the time now).
	QueuedRuns(ctx context.Context, repoID int64) ([]Run, error)
	// Needs returns the needs of each of runIDs (those with none are
	// absent), each run's in the order they were created.
	Needs(ctx context.Context, runIDs []int64) (map[int64][]Need, error)
	// EnvironmentsGone records that the environments of runner runnerID's
	// ended runs are gone at now: of run runID only, when it is not 0;
	// else of every run the runner ever held but those in keep.
	// Recorded times are never moved later. It returns the retries
	// waiting for those environments that may be claimed now.
	EnvironmentsGone(ctx context.Context, runnerID, runID int64, keep []int64, now time.Time) ([]Run, error)
	// GroupHolder returns the oldest run of run's repository and
	// concurrency group, older than run and not ended, that holds run
	// back; 0 when none (or run has no group).
	GroupHolder(ctx context.Context, run Run) (int64, error)
	// RunByToken returns the run whose current run token hashes to
	// tokenHash; ErrNotFound when none (tokens are cleared when a run ends).
	RunByToken(ctx context.Context, tokenHash string) (Run, error)

	// ClaimRun moves run id from queued to claimed for c.RunnerID, atomically:
	// of two concurrent claims of one run exactly one succeeds, the other
	// gets ErrConflict (as does a claim of a run that is not queued).
	ClaimRun(ctx context.Context, id int64, c Claim) (Run, error)
	// RenewLease extends the lease of a claimed or running run held by
	// runnerID to until. ErrRunFinished when the run is final, ErrConflict
	// when another runner holds it, ErrNotFound when absent.
	RenewLease(ctx context.Context, id, runnerID int64, until time.Time) (Run, error)
	// UpdateStep creates or updates a step row (idempotent). A step in state
	// running moves a claimed run to running and sets its StartedAt. A step
	// in a final state never goes back to pending or running. Once the run
	// is final, an update to pending or running changes nothing (and is no
	// error), while an update to a final state is recorded: it is the
	// runner's late report of what really happened.
	UpdateStep(ctx context.Context, runID int64, s Step) (Run, error)
	// EnsureStep creates a step row when none exists (idempotent): pending,
	// or, when the run is already final, ended as its running steps were
	// (see CompleteRun).
	EnsureStep(ctx context.Context, runID int64, index int, name string, now time.Time) error
	// CompleteRun records a run's final result once and clears its run
	// token. Ending a run (this way or any other) in the same
	// transaction: creates its next attempt when its `retry:` allows
	// (errored, with one of RetryWhen, Attempt <= RetryMax; the runs that
	// needed it need the new attempt instead); else, when it did not
	// succeed, skips the queued runs that need it (transitively), and,
	// when it failed or errored in a fail-fast matrix, cancels its
	// siblings that have not ended (fail-fast). See Run.Followups. Repeating the same state, reason and exit code succeeds without
	// change; a different result on a final run is ErrRunFinished.
	//
	// Every path that ends a run (CompleteRun, CancelRun of a queued run,
	// ExpireLeases, CreatePipeline of a final run) ends its unfinished steps
	// in the same transaction: a running step becomes cancelled (run
	// cancelled), succeeded (run succeeded) or failed (otherwise), with the
	// run's reason; a pending step becomes skipped.
	CompleteRun(ctx context.Context, id int64, f RunFinal) (Run, error)
	// CancelRun ends a queued run as cancelled at now, or marks a claimed or
	// running run CancelRequested (idempotent). ErrRunFinished when final.
	CancelRun(ctx context.Context, id int64, now time.Time) (Run, error)
	// ExpireLeases ends every claimed or running run whose lease expired
	// before now: errored/runner-lost, or cancelled when a cancel had been
	// requested (their steps end as CompleteRun describes). The message
	// says when the runner was last heard from or, when its last session
	// handed its runs over (HandOver) and no session started since, that
	// no new runner process took the run within the handover grace. It
	// returns the runs it ended, in their new state.
	ExpireLeases(ctx context.Context, now time.Time) ([]Run, error)
	// ExtendLeases sets the lease of every claimed or running run to until,
	// never shortening one (a handover grace may reach further), and
	// reports how many there were (used at server start).
	ExtendLeases(ctx context.Context, until time.Time) (int, error)
	// RotateRunToken gives run id a new run token (tokenHash, SHA-256 hex;
	// the old token stops working at once) and renews its lease to
	// leaseUntil, for a claimed or running run held by runnerID.
	// ErrRunFinished (with the run) when the run is final, ErrConflict when
	// it is queued or another runner holds it, ErrNotFound when absent.
	RotateRunToken(ctx context.Context, id, runnerID int64, tokenHash string, leaseUntil time.Time) (Run, error)

	// RegisterRunner creates a pending runner. Registering the same DID for
	// the same repository and name again is idempotent (labels are updated;
	// created is false). ErrConflict when the name is taken by another DID
	// or the DID is registered under another repository or name. ErrLimit
	// when creating it would make more than maxPending pending runners in
	// the repository (0: no limit); the count and the insert are atomic.
	RegisterRunner(ctx context.Context, r Runner, maxPending int) (out Runner, created bool, err error)
	// CreateRegistrationToken stores a registration token (by its hash)
	// and deletes the expired ones. ErrLimit when the repository would
	// have more than maxLive unexpired tokens (0: no limit).
	CreateRegistrationToken(ctx context.Context, t RegistrationToken, maxLive int) error
	// RegistrationToken returns the unexpired token hashing to hash (uses
	// left or not); ErrNotFound when there is none.
	RegistrationToken(ctx context.Context, hash string, now time.Time) (RegistrationToken, error)
	// UseRegistrationToken takes one use of the unexpired token hashing to
	// hash for repository repoID, atomically; ErrNotFound when there is no
	// such token with a use left.
	UseRegistrationToken(ctx context.Context, hash string, repoID int64, now time.Time) error
	// ReturnRegistrationToken gives back a use UseRegistrationToken took
	// (the registration it allowed failed).
	ReturnRegistrationToken(ctx context.Context, hash string) error
	// RunnerByDID: ErrNotFound when absent.
	RunnerByDID(ctx context.Context, did string) (Runner, error)
	// RunnerByName: ErrNotFound when absent.
	RunnerByName(ctx context.Context, repoID int64, name string) (Runner, error)
	// ListRunners lists a repository's runners by name: at most limit of
	// them (0: all), those whose name sorts after after ("" from the
	// first).
	ListRunners(ctx context.Context, repoID int64, after string, limit int) ([]Runner, error)
	// ApproveRunner marks a runner approved (idempotent).
	ApproveRunner(ctx context.Context, id int64) (Runner, error)
	// RemoveRunner deletes a runner; ErrNotFound when absent. The runs it
	// holds (claimed or running) end at once, in the same transaction:
	// errored/runner-lost with a message saying who removed it when and
	// when it was last heard from (cancelled/cancelled when a cancel was
	// requested). It returns those runs as they ended.
	RemoveRunner(ctx context.Context, id int64, by string, now time.Time) ([]Run, error)
	// TouchRunner records that the runner was heard from at.
	TouchRunner(ctx context.Context, id int64, at time.Time) error
	// StartSession makes session (an opaque, unguessable id) the current
	// session of runner id, started at now, which ends any earlier session
	// and clears a handover; in the same transaction the lease of every
	// run the runner holds (claimed or running) is renewed to leaseUntil.
	// It returns the runner as it was before (prev.Session is the session
	// superseded, "" for none; prev.HandedOverAt tells whether it had
	// handed over) and the held runs, oldest first, in their new state.
	// ErrNotFound when the runner is absent.
	StartSession(ctx context.Context, id int64, session string, now, leaseUntil time.Time) (prev Runner, held []Run, err error)
	// HandOver ends session, the open session of runner id (see
	// Runner.SessionOpen), at now: the lease of every run the runner holds
	// is set to until, and the runner records HandedOverAt now and
	// HandoverUntil until, so that the session is refused from then on and
	// a run whose lease lapses says it was handed over. It returns the held
	// runs, oldest first. ErrConflict when session is not the runner's
	// open session (superseded, or handed over already), ErrNotFound when
	// the runner is absent.
	HandOver(ctx context.Context, id int64, session string, now, until time.Time) ([]Run, error)

	// PutOutputs records the outputs archive of run o.RunID with its
	// entries, atomically. Recording the same archive again (same SHA256)
	// changes nothing and succeeds; another archive for a run that has one
	// is ErrConflict; ErrNotFound when the run is absent. A run's outputs
	// rows go when the run's row goes (ON DELETE CASCADE).
	PutOutputs(ctx context.Context, o Outputs, entries []OutputEntry) error
	// RunOutputs returns what PutOutputs recorded for runID; ErrNotFound
	// when the run stored no outputs.
	RunOutputs(ctx context.Context, runID int64) (Outputs, error)
	// OutputEntries lists the entries of runID's outputs by path: at most
	// limit of them (0: all), those whose path sorts after after ("" from
	// the first).
	OutputEntries(ctx context.Context, runID int64, after string, limit int) ([]OutputEntry, error)

	// SetSecret creates or replaces the secret (repoID, name, runner).
	SetSecret(ctx context.Context, s Secret) error
	// ListSecrets lists a repository's secrets without ciphertexts, by name
	// then runner.
	ListSecrets(ctx context.Context, repoID int64) ([]Secret, error)
	// DeleteSecret: ErrNotFound when absent.
	DeleteSecret(ctx context.Context, repoID int64, name, runner string) error
	// SecretsFor returns the secrets (with ciphertexts) of a repository whose
	// names are in names, every runner scope included.
	SecretsFor(ctx context.Context, repoID int64, names []string) ([]Secret, error)

	// Web pages (internal/web): sessions, pipelines, runner processes.

	// CreateWebSession stores a browser session (by the hash of its id).
	// Expired sessions are deleted on the way.
	CreateWebSession(ctx context.Context, s WebSession) error
	// WebSession returns the unexpired session whose id hashes to idHash;
	// ErrNotFound when there is none (never was, signed out, expired).
	WebSession(ctx context.Context, idHash string, now time.Time) (WebSession, error)
	// DeleteWebSession ends a session (idempotent).
	DeleteWebSession(ctx context.Context, idHash string) error
	// ListPipelines lists a repository's pipelines newest first, as f
	// selects them.
	ListPipelines(ctx context.Context, f PipelineFilter) ([]Pipeline, error)
	// RunWorkflows lists the names of the workflows of a repository's
	// newest runs (at most limit names, by name), for the Pipelines tab's
	// workflow filter.
	RunWorkflows(ctx context.Context, repoID int64, limit int) ([]string, error)
	// RunsOfPipelines lists the runs of the given pipelines by id.
	RunsOfPipelines(ctx context.Context, pipelineIDs []int64) ([]Run, error)
	// ActiveRuns lists a repository's claimed and running runs by id.
	ActiveRuns(ctx context.Context, repoID int64) ([]Run, error)
	// SetRunnerProcess records what runner id's latest process said of
	// itself when its session started.
	SetRunnerProcess(ctx context.Context, p RunnerProcess) error
	// RunnerProcesses returns the recorded processes of a repository's
	// runners, by runner id.
	RunnerProcesses(ctx context.Context, repoID int64) (map[int64]RunnerProcess, error)

	// RecordJTI remembers key (a hash of a runner token's issuer and jti)
	// until expires, for every replica and across restarts: ErrConflict
	// when key is remembered already (the token is a replay).
	RecordJTI(ctx context.Context, key string, expires time.Time) error
	// PruneJTIs forgets the keys that expired before now and reports how
	// many.
	PruneJTIs(ctx context.Context, now time.Time) (int64, error)

	// Counts returns what the metrics endpoint reports of the database,
	// counting runners heard from since onlineSince as online.
	Counts(ctx context.Context, onlineSince time.Time) (Counts, error)
	// Ping checks that the database answers and its migrations are
	// applied (readiness).
	Ping(ctx context.Context) error

	// Close releases the database. Calls after Close fail.
	Close() error

	// Retention and usage (issue 36; types in retention.go).

	// SetRepoRetention records repository r.RepoID's own policy (nil
	// fields: the server's), replacing any earlier one. ErrNotFound when
	// the repository is absent.
	SetRepoRetention(ctx context.Context, r RepoRetention) error
	// RepoRetention returns repoID's own policy; nil fields (and SetBy
	// "") when its owner never set one.
	RepoRetention(ctx context.Context, repoID int64) (RepoRetention, error)
	// UnmeasuredRuns lists up to limit runs, by end then id, that ended
	// in [from, before) and have no RunBytes yet (from zero: since ever).
	UnmeasuredRuns(ctx context.Context, from, before time.Time, limit int) ([]int64, error)
	// RecordRunBytes records what a run held (idempotent: a second
	// measure replaces the first, never an expiry). ErrNotFound when the
	// run is absent.
	RecordRunBytes(ctx context.Context, b RunBytes) error
	// ExpiryCandidates lists up to q.Limit ended, measured, not yet
	// expired runs, by end then id, whose policy (the repository's over
	// q.Server) lets their bytes go at q.Now, among those ended before
	// q.EndedBefore. Runs that have not ended are never listed.
	ExpiryCandidates(ctx context.Context, q ExpiryQuery) ([]int64, error)
	// MarkRunExpired records that run's bytes were removed at at; false
	// when they were recorded removed already (another replica did).
	// ErrNotFound when the run has no RunBytes.
	MarkRunExpired(ctx context.Context, runID int64, at time.Time) (bool, error)
	// RunExpiredAt returns when run's bytes were removed; nil when kept.
	RunExpiredAt(ctx context.Context, runID int64) (*time.Time, error)
	// PutCacheUsage keeps u as its repository's latest report for its
	// store, unless a later one (ReportedAt) is kept already.
	PutCacheUsage(ctx context.Context, u CacheUsage) error
	// RepoUsage sums what repoID's runs hold (see RepoUsage), listing at
	// most unmeasuredMax unmeasured runs.
	RepoUsage(ctx context.Context, repoID int64, unmeasuredMax int) (RepoUsage, error)

	// Scheduled runs (issue 38; types in schedules.go). Firing is
	// CreatePipeline with NewPipeline.Schedule.

	// SyncSchedules makes repoID's schedules exactly want, in one
	// transaction: a schedule whose key is in want keeps its row (NextAt,
	// pause, history) and takes want's Problem; one not in want is
	// removed; a new key is added with want's NextAt. It returns the
	// repository's schedules by id. Duplicate keys in want count once
	// (the first). Syncs of one repository may run concurrently (on
	// several replicas): each applies whole, one after the other.
	SyncSchedules(ctx context.Context, repoID int64, want []NewSchedule) ([]Schedule, error)
	// Schedules lists repoID's schedules by id.
	Schedules(ctx context.Context, repoID int64) ([]Schedule, error)
	// Schedule returns one schedule: ErrNotFound when absent.
	Schedule(ctx context.Context, id int64) (Schedule, error)
	// DueSchedules lists up to limit schedules of every repository that
	// are not paused and whose NextAt is not after now, by NextAt then id
	// (limit 0: all). A schedule with a Problem is listed too.
	DueSchedules(ctx context.Context, now time.Time, limit int) ([]Schedule, error)
	// NextScheduleAt returns the earliest NextAt of the schedules not
	// paused; ok is false when there is none.
	NextScheduleAt(ctx context.Context) (at time.Time, ok bool, err error)
	// SkipSchedule moves schedule id's NextAt from expected to next
	// without a pipeline, recording problem (why that time did not run):
	// false when NextAt is no longer expected (another replica fired or
	// skipped it). ErrNotFound when absent.
	SkipSchedule(ctx context.Context, id int64, expected, next time.Time, problem string) (bool, error)
	// PauseSchedule pauses (by, at) or resumes (paused false) schedule id
	// and returns it; resuming sets NextAt to next, so the times passed
	// while paused never fire. Idempotent: pausing a paused schedule keeps
	// who paused it and when, resuming a running one keeps its NextAt.
	// ErrNotFound when absent.
	PauseSchedule(ctx context.Context, id int64, paused bool, by string, at, next time.Time) (Schedule, error)
}

// Counts are the database's figures for the metrics endpoint: cheap
// aggregates, no run ids.
type Counts struct {
	// Runs counts runs by state and reason (reason "" while not final).
	Runs []RunCount
	// OldestQueued is when the oldest queued run was created; nil when
	// none is queued.
	OldestQueued *time.Time
	// RunnersOnline counts approved runners heard from since onlineSince;
	// RunnersApproved all approved runners.
	RunnersOnline, RunnersApproved int64
}

// RunCount is the number of runs in one state with one reason.
type RunCount struct {
	State, Reason string
	N             int64
}

// WebSession is a browser signed in with an account API token. Only hashes
// are stored: the session lasts no longer than the token does.
type WebSession struct {
	IDHash    string // SHA-256 hex of the session id (the cookie's value)
	TokenHash string // SHA-256 hex of the API token signed in with
	CSRF      string // the session's anti-CSRF form token
	CreatedAt time.Time
	ExpiresAt time.Time
}

// RunnerProcess is what a runner's latest process said of itself.
type RunnerProcess struct {
	RunnerID int64
	Executor string // e.g. shell, kube
	Version  string // knotless-run's version
	// Digest is the SHA-256 (lower-case hex) of the process's
	// executable; "" when it did not say.
	Digest string
	// Capacity is how many runs it takes at once (0: did not say).
	Capacity int
	// Facts are what its executor says of where runs go (a kube
	// runner's namespace and pod); nil when none.
	Facts     map[string]string
	StartedAt time.Time
}

// PipelineFilter selects pipelines for ListPipelines. Zero fields do not
// filter.
type PipelineFilter struct {
	RepoID int64 // required
	// Before, when set, lists only pipelines with a smaller id: the next
	// page after a page whose last pipeline had that id.
	Before int64
	Limit  int    // 0: 20
	Ref    string // the pipeline's full ref, e.g. refs/heads/main
	SHA    string // the pipeline's commit (a full id)
	// State and Workflow select pipelines with a run in that state and
	// of that workflow (both, when both are set).
	State    string
	Workflow string
	// Empty selects only pipelines that made no run (a push whose
	// workflow files were all ignored: its Notes say why).
	Empty bool
}
