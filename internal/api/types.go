package api

import (
	"bytes"
	"fmt"
	"time"
	"unicode/utf8"
)

// Run states. A run moves queued → claimed → running → one final state;
// errored runs may also be created final (a workflow that failed to parse),
// and a queued run ends skipped when a run it needs did not succeed.
const (
	StateQueued    = "queued"
	StateClaimed   = "claimed"
	StateRunning   = "running"
	StateSucceeded = "succeeded"
	StateFailed    = "failed"
	StateCancelled = "cancelled"
	StateErrored   = "errored"
	// StateSkipped: the run never started because a run it needs
	// (`needs:`) ended without succeeding (ReasonNeedFailed).
	StateSkipped = "skipped"
)

// Reasons a run (or step) did not succeed.
const (
	ReasonExitCode   = "exit-code"
	ReasonTimeout    = "timeout"
	ReasonOOMKilled  = "oom-killed"
	ReasonEvicted    = "evicted"
	ReasonImagePull  = "image-pull"
	ReasonRunnerLost = "runner-lost"
	ReasonCancelled  = "cancelled"
	// ReasonSuperseded: a newer run of the same concurrency group with
	// cancel-in-progress cancelled this one.
	ReasonSuperseded = "superseded"
	// ReasonWorkflowInvalid: the workflow file failed to parse or validate;
	// the run's setup log holds FILE:LINE:COL messages.
	ReasonWorkflowInvalid = "workflow-invalid"
	// ReasonCheckout: the runner could not fetch or check out the commit.
	ReasonCheckout = "checkout"
	// ReasonExecutor: the executor failed to prepare or run the environment.
	ReasonExecutor = "executor"
	// ReasonUnsupported: the runner cannot run what the workflow asks for,
	// and another attempt would end the same way: an architecture it has
	// no step agent for, an image of another architecture than the node's,
	// `arch:` on a runner whose steps run on its own host, more resources
	// than it allows, container builds it does not allow. Errored like an
	// environment's fault, and never retried (`retry:` cannot name it).
	ReasonUnsupported = "unsupported"
	// ReasonRunnerStopped: the runner was shut down before the run finished.
	ReasonRunnerStopped = "runner-stopped"
	// ReasonUnschedulable: the run's pod was not scheduled in time; the
	// message holds the scheduler's words.
	ReasonUnschedulable = "unschedulable"
	// ReasonPodLost: the run's pod vanished or ended under a running step
	// (deleted from outside, its node lost).
	ReasonPodLost = "pod-lost"
	// ReasonSecretInvalid: a secret the run received cannot be given to a
	// step (a value holding a NUL byte, stored by an older server); the
	// message names the secret.
	ReasonSecretInvalid = "secret-invalid"
	// ReasonPreempted: the scheduler took the job pod's node for a pod of
	// higher priority (DisruptionTarget PreemptionByScheduler): the
	// environment's doing, unlike evicted for the node's pressure or a
	// drain, a retry rule can tell them apart.
	ReasonPreempted = "preempted"
	// ReasonNeedFailed: a run this one needs (`needs:`) ended without
	// succeeding, so this one is skipped; the message names it.
	ReasonNeedFailed = "need-failed"
	// ReasonFailFast: another run of the same matrix failed and the
	// workflow's `matrix: {fail-fast: true}` cancelled this one.
	ReasonFailFast = "fail-fast"
	// ReasonIDToken: the server did not give a step the id token it lists
	// (`id-tokens:`); the message says why.
	ReasonIDToken = "id-token"
	// ReasonService: a service of the workflow (`services:`) could not
	// start or be ready (it exited, its probe never passed within its
	// ready-timeout), or the executor runs no services; the message names
	// it. The workflow's doing: the run ends failed. (A service image that
	// cannot be pulled is image-pull.)
	ReasonService = "service"
)

// Step states.
const (
	StepPending   = "pending"
	StepRunning   = "running"
	StepSucceeded = "succeeded"
	StepFailed    = "failed"
	StepSkipped   = "skipped"
	StepCancelled = "cancelled"
	// StepErrored is a step its environment let down (evicted,
	// preempted, the pod or container lost): not its own failure, so it
	// has no exit code of its own.
	StepErrored = "errored"
)

// StepFinalStates are the final step states, the ones a step never leaves.
var StepFinalStates = []string{StepSucceeded, StepFailed, StepErrored, StepSkipped, StepCancelled}

// StepIsFinal reports whether a step's state is one it never leaves.
func StepIsFinal(state string) bool {
	switch state {
	case StepSucceeded, StepFailed, StepErrored, StepSkipped, StepCancelled:
		return true
	}
	return false
}

// SetupStep is the step index of a run's setup log: checkout, workflow
// errors and messages of the runner. Workflow steps are numbered from 1.
const SetupStep = 0

// RunStates are every run state, in the order of a run's life.
var RunStates = []string{StateQueued, StateClaimed, StateRunning, StateSucceeded, StateFailed, StateCancelled,
	StateErrored, StateSkipped}

// IsFinal reports whether state is one a run never leaves.
func IsFinal(state string) bool {
	switch state {
	case StateSucceeded, StateFailed, StateCancelled, StateErrored, StateSkipped:
		return true
	}
	return false
}

// IsReason reports whether reason is one of the Reason constants above:
// the bounded set a metric label may take (a runner may send others).
func IsReason(reason string) bool {
	switch reason {
	case ReasonExitCode, ReasonTimeout, ReasonOOMKilled, ReasonEvicted, ReasonImagePull, ReasonRunnerLost,
		ReasonCancelled, ReasonSuperseded, ReasonWorkflowInvalid, ReasonCheckout, ReasonExecutor,
		ReasonRunnerStopped, ReasonUnschedulable, ReasonPodLost, ReasonSecretInvalid, ReasonPreempted, ReasonIDToken,
		ReasonNeedFailed, ReasonFailFast, ReasonService, ReasonUnsupported:
		return true
	}
	return false
}

// DescribeServerOutput is the answer of MethodDescribeServer.
type DescribeServerOutput struct {
	// DID is the server's service DID: the audience of runner JWTs.
	DID     string `json:"did"`
	Version string `json:"version"`
}

// Account is a user of the server.
type Account struct {
	Handle string `json:"handle"`
	DID    string `json:"did"`
	Admin  bool   `json:"admin"`
	// Disabled: an admin disabled the account; its tokens are refused.
	Disabled bool `json:"disabled,omitempty"`
}

// AccountRef names an account (MethodDisableAccount, MethodEnableAccount).
type AccountRef struct {
	Handle string `json:"handle"`
}

// MaxTokensPerAccount caps the named tokens of one account.
const MaxTokensPerAccount = 100

// Token describes one named API token of the caller. It never carries the
// token itself.
type Token struct {
	Name       string     `json:"name"`
	CreatedAt  time.Time  `json:"createdAt"`
	ExpiresAt  *time.Time `json:"expiresAt,omitempty"`  // absent: never
	LastUsedAt *time.Time `json:"lastUsedAt,omitempty"` // to the minute; absent: never used
	// Current: this is the token the request was made with.
	Current bool `json:"current,omitempty"`
}

// CreateTokenInput is the body of MethodCreateToken. ExpiresAt, when set,
// must be in the future.
type CreateTokenInput struct {
	Name      string     `json:"name"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// CreateTokenOutput carries the new token, shown once.
type CreateTokenOutput struct {
	Token  Token  `json:"token"`
	Secret string `json:"secret"`
}

// ListTokensOutput is the answer of MethodListTokens.
type ListTokensOutput struct {
	Tokens []Token `json:"tokens"`
}

// RevokeTokenInput is the body of MethodRevokeToken.
type RevokeTokenInput struct {
	Name string `json:"name"`
}

// CreateAccountInput is the body of MethodCreateAccount. DID is optional: a
// did:key is made for the account when it is empty.
type CreateAccountInput struct {
	Handle string `json:"handle"`
	DID    string `json:"did,omitempty"`
	Admin  bool   `json:"admin,omitempty"`
}

// CreateAccountOutput carries the new account's API token, shown once.
type CreateAccountOutput struct {
	Account Account `json:"account"`
	Token   string  `json:"token"`
}

// Repo is a repository "OWNER/NAME".
type Repo struct {
	Owner     string    `json:"owner"`
	Name      string    `json:"name"`
	CloneURL  string    `json:"cloneUrl"`
	CreatedAt time.Time `json:"createdAt"`
}

// FullName returns "OWNER/NAME".
func (r Repo) FullName() string { return r.Owner + "/" + r.Name }

// CreateRepoInput is the body of MethodCreateRepo. Repo is "NAME" (owned by
// the caller) or "OWNER/NAME" (admins, or the caller's own handle).
type CreateRepoInput struct {
	Repo string `json:"repo"`
}

// ListReposOutput is the answer of MethodListRepos.
type ListReposOutput struct {
	Repos []Repo `json:"repos"`
}

// Pipeline is the set of runs made by one trigger.
type Pipeline struct {
	ID        int64     `json:"id"`
	Repo      string    `json:"repo"`
	Ref       string    `json:"ref"` // full ref name, e.g. refs/heads/main
	SHA       string    `json:"sha"`
	Event     string    `json:"event"` // push, tag, manual
	CreatedAt time.Time `json:"createdAt"`
	// Notes are what people should read about the pipeline besides its
	// runs, one line each: e.g. a file in .knotless/workflows that is not
	// a workflow and did not run.
	Notes []string `json:"notes,omitempty"`
	// RerunOf is the pipeline whose runs this one runs again
	// (MethodRerun); absent when none.
	RerunOf int64 `json:"rerunOf,omitempty"`
	Runs    []Run `json:"runs"`
}

// Run is one workflow executing once for one pipeline.
type Run struct {
	ID       int64  `json:"id"`
	Pipeline int64  `json:"pipeline"`
	Repo     string `json:"repo"`
	Ref      string `json:"ref"`
	SHA      string `json:"sha"`
	Event    string `json:"event"`
	// BeforeSHA is the commit the ref pointed at before the push that made
	// the run; "" for a new branch or tag and for manual triggers.
	BeforeSHA string `json:"beforeSha,omitempty"`
	// Actor is the handle of the account that pushed, triggered or re-ran.
	Actor string `json:"actor,omitempty"`
	// PipelineNotes are the notes of the run's pipeline (Pipeline.Notes);
	// PipelineRerunOf is its RerunOf.
	PipelineNotes   []string   `json:"pipelineNotes,omitempty"`
	PipelineRerunOf int64      `json:"pipelineRerunOf,omitempty"`
	Workflow        string     `json:"workflow"`     // the workflow's name
	WorkflowPath    string     `json:"workflowPath"` // e.g. .knotless/workflows/ci.yml
	State           string     `json:"state"`
	Reason          string     `json:"reason,omitempty"`
	Message         string     `json:"message,omitempty"` // a person-readable detail of Reason
	ExitCode        *int       `json:"exitCode,omitempty"`
	Runner          string     `json:"runner,omitempty"` // name of the runner that claimed it
	CreatedAt       time.Time  `json:"createdAt"`
	StartedAt       *time.Time `json:"startedAt,omitempty"`
	FinishedAt      *time.Time `json:"finishedAt,omitempty"`
	// ConcurrencyGroup is the run's expanded `concurrency:` group, when
	// its workflow has one.
	ConcurrencyGroup string `json:"concurrencyGroup,omitempty"`
	// Matrix is the run's values of its workflow's `matrix:` (none
	// without one); its runs share WorkflowPath and Pipeline, and
	// Workflow says the values ("test (linux, 1.26)").
	Matrix []MatrixValue `json:"matrix,omitempty"`
	// Needs are the runs of the pipeline this one waits for (`needs:`),
	// by id, with the name the workflow gave each; a retried need is
	// replaced by its latest attempt.
	Needs []Need `json:"needs,omitempty"`
	// Attempt counts the run's attempts from 1: a run that ended errored
	// for its environment (`retry:`) is run again as a new run, Attempt
	// + 1, with RetryOf the run before; RetriedBy is the run after.
	Attempt   int   `json:"attempt,omitempty"`
	RetryOf   int64 `json:"retryOf,omitempty"`
	RetriedBy int64 `json:"retriedBy,omitempty"`
	// NotRetried says why an errored run whose workflow has `retry:` was
	// not run again ("" otherwise): its reason is one no attempt can mend
	// (unsupported), or retry's when does not name it, or it was the last
	// attempt.
	NotRetried string `json:"notRetried,omitempty"`
	// Exports are the values the run's steps wrote to $KNOTLESS_EXPORT,
	// for the runs that need it (MethodGetRun only).
	Exports map[string]string `json:"exports,omitempty"`
	Steps   []Step            `json:"steps,omitempty"`
	// Outputs summarizes the outputs the run stored (MethodGetRun only);
	// nil when it stored none.
	Outputs *RunOutputs `json:"outputs,omitempty"`
}

// MatrixValue is one value of a run's matrix.
type MatrixValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Need is one run another run waits for: Run's id, and Name, the entry of
// `needs:` that names its workflow.
type Need struct {
	Run  int64  `json:"run"`
	Name string `json:"name"`
}

// RunOutputs describes a run's stored outputs archive.
type RunOutputs struct {
	Size     int64     `json:"size"`   // the archive's length in bytes
	SHA256   string    `json:"sha256"` // hex SHA-256 of the archive
	Files    int       `json:"files"`  // entries: files, directories and symbolic links
	Bytes    int64     `json:"bytes"`  // total size of the regular files, in bytes
	StoredAt time.Time `json:"storedAt"`
	// Entries is one page of the archive's entries, by path
	// (MethodListOutputs only); Cursor, when set, reads the next page.
	Entries []OutputEntry `json:"entries,omitempty"`
	Cursor  string        `json:"cursor,omitempty"`
}

// Kinds of OutputEntry.
const (
	OutputFile    = "file"
	OutputDir     = "dir"
	OutputSymlink = "symlink"
)

// OutputEntry is one entry of a run's outputs archive.
type OutputEntry struct {
	// Path is slash-separated, relative to the checkout, as the workflow's
	// `outputs:` named it or below it (e.g. "dist/app/bin").
	Path   string `json:"path"`
	Kind   string `json:"kind"`             // OutputFile, OutputDir or OutputSymlink
	Size   int64  `json:"size"`             // bytes of a file; 0 otherwise
	Mode   uint32 `json:"mode"`             // permission bits (0o755)
	Target string `json:"target,omitempty"` // a symbolic link's target
}

// UploadOutputsOutput is the answer of MethodUploadOutputs: how many bytes
// of the archive the server holds, and whether it is stored (verified,
// complete).
type UploadOutputsOutput struct {
	Size   int64 `json:"size"`
	Stored bool  `json:"stored"`
}

// Step is one step of a run as the server knows it. Index 0 (SetupStep) is
// the setup log.
type Step struct {
	Index    int    `json:"index"`
	Name     string `json:"name"`
	State    string `json:"state"`
	ExitCode *int   `json:"exitCode,omitempty"`
	Reason   string `json:"reason,omitempty"`
	LogSize  int64  `json:"logSize"` // bytes
	// StartedAt and FinishedAt are when the step started running and when
	// it ended, as its runner measured them (RFC 3339); absent while
	// unknown (pending, skipped, or recorded by an older runner).
	// DurationMS is FinishedAt - StartedAt in milliseconds, present when
	// both are.
	StartedAt  *time.Time `json:"startedAt,omitempty"`
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
	DurationMS *int64     `json:"durationMs,omitempty"`
}

// ListRunsOutput is the answer of MethodListRuns. Cursor, when set, reads
// the next page (older runs): pass it as the "cursor" parameter.
type ListRunsOutput struct {
	Runs   []Run  `json:"runs"`
	Cursor string `json:"cursor,omitempty"`
	// EmptyPipelines are pipelines that made no run, with the notes that
	// say why (a push whose workflow files were all ignored): on the first
	// page of one repository's runs, its newest (at most 5, newer than the
	// oldest run listed unless that page is the last); for a pipeline
	// (the pipeline parameter) that ran nothing, that pipeline.
	EmptyPipelines []EmptyPipeline `json:"emptyPipelines,omitempty"`
}

// EmptyPipeline is a pipeline that made no run, and why (Notes).
type EmptyPipeline struct {
	ID        int64     `json:"id"`
	Ref       string    `json:"ref"`
	SHA       string    `json:"sha"`
	Event     string    `json:"event"`
	CreatedAt time.Time `json:"createdAt"`
	Notes     []string  `json:"notes"`
}

// RunRef names a run.
type RunRef struct {
	Run int64 `json:"run"`
}

// TriggerInput is the body of MethodTriggerRun: a manual pipeline for the
// commit Ref points at, or for SHA when set (a commit Ref reaches, which
// is recorded as the pipeline's ref). Workflow, when set, limits it to the
// workflow with that name or file path.
type TriggerInput struct {
	Repo     string `json:"repo"`
	Ref      string `json:"ref"`           // an existing branch or tag (CheckTriggerRef); default the default branch
	SHA      string `json:"sha,omitempty"` // a full commit id (CheckCommitID)
	Workflow string `json:"workflow,omitempty"`
}

// RerunInput is the body of MethodRerun: exactly one of Run (a final
// run, run again) and Pipeline (a pipeline whose runs all ended: each of
// its runs that did not succeed, run again).
type RerunInput struct {
	Run      int64 `json:"run,omitempty"`
	Pipeline int64 `json:"pipeline,omitempty"`
}

// SetSecretInput is the body of MethodSetSecret. Runner, when set, scopes the
// secret to the runner of that name.
//
// The value is in exactly one of Value and ValueBytes: Value for a value
// that is valid UTF-8 (a JSON string cannot carry other bytes: encoders
// replace them with U+FFFD), ValueBytes (base64 in JSON) for any value.
// NewSetSecretInput picks the field; SetSecretInput.Bytes reads it back.
type SetSecretInput struct {
	Repo       string `json:"repo"`
	Name       string `json:"name"`
	Value      string `json:"value,omitempty"`
	ValueBytes []byte `json:"valueBytes,omitempty"`
	Runner     string `json:"runner,omitempty"`
}

// NewSetSecretInput returns the input setting secret name of repo to v,
// byte-exact: v goes in Value when it is valid UTF-8 (as every server
// reads it), else in ValueBytes.
func NewSetSecretInput(repo, name, runner string, v []byte) SetSecretInput {
	in := SetSecretInput{Repo: repo, Name: name, Runner: runner}
	if utf8.Valid(v) {
		in.Value = string(v)
	} else {
		in.ValueBytes = v
	}
	return in
}

// Bytes returns the value in (from Value or ValueBytes); it fails when
// both are set.
func (in SetSecretInput) Bytes() ([]byte, error) {
	if in.Value != "" && len(in.ValueBytes) > 0 {
		return nil, fmt.Errorf("secret %s: give the value in value or in valueBytes, not both", in.Name)
	}
	if in.Value != "" {
		return []byte(in.Value), nil
	}
	return in.ValueBytes, nil
}

// CheckSecretValue returns an error when v cannot be a secret's value
// because no step could receive it: a value holding a NUL byte (an
// environment variable ends at the first NUL). Any other bytes, valid
// UTF-8 or not, are carried to the step exactly.
func CheckSecretValue(name string, v []byte) error {
	if i := bytes.IndexByte(v, 0); i >= 0 {
		return fmt.Errorf("secret %s: the value holds a NUL byte (at byte %d of %d): an environment variable cannot hold NUL, so no step could receive it; remove it or encode the value (e.g. base64)", name, i, len(v))
	}
	return nil
}

// Secret describes a stored secret. It never carries the value.
type Secret struct {
	Name      string    `json:"name"`
	Runner    string    `json:"runner,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// ListSecretsOutput is the answer of MethodListSecrets.
type ListSecretsOutput struct {
	Secrets []Secret `json:"secrets"`
}

// DeleteSecretInput is the body of MethodDeleteSecret.
type DeleteSecretInput struct {
	Repo   string `json:"repo"`
	Name   string `json:"name"`
	Runner string `json:"runner,omitempty"`
}

// Runner statuses.
const (
	RunnerPending  = "pending"
	RunnerApproved = "approved"
)

// Runner is a registered knotless-run identity.
type Runner struct {
	Repo       string     `json:"repo"`
	Name       string     `json:"name"`
	DID        string     `json:"did"`
	Labels     []string   `json:"labels"`
	Status     string     `json:"status"` // pending, approved
	CreatedAt  time.Time  `json:"createdAt"`
	LastSeenAt *time.Time `json:"lastSeenAt,omitempty"`
	// HandoverUntil is set while the runner's last process has handed its
	// runs over and no new process took them yet: they wait until then.
	HandoverUntil *time.Time `json:"handoverUntil,omitempty"`
}

// RegisterRunnerInput is the body of MethodRegisterRunner. The JWT's issuer
// is the runner's DID; PublicKey (multibase) is needed only when that DID is
// not a did:key.
type RegisterRunnerInput struct {
	Repo      string   `json:"repo"`
	Name      string   `json:"name"`
	Labels    []string `json:"labels"`
	PublicKey string   `json:"publicKey,omitempty"`
}

// CreateRegistrationTokenInput is the body of
// MethodCreateRegistrationToken. ExpiresIn is in seconds (0: one hour);
// Uses is how many registrations the token allows (0: one).
type CreateRegistrationTokenInput struct {
	Repo      string `json:"repo"`
	ExpiresIn int64  `json:"expiresIn,omitempty"`
	Uses      int    `json:"uses,omitempty"`
}

// RegistrationToken is the answer of MethodCreateRegistrationToken.
type RegistrationToken struct {
	Token     string    `json:"token"`
	Repo      string    `json:"repo"`
	Uses      int       `json:"uses"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// RunnerRef names a runner of a repository. DID, when set on
// MethodApproveRunner, must equal the registered runner's DID (the one
// `knotless-run login` printed), else the call fails with ErrConflict: it
// guards against approving a registration someone else made under that name.
type RunnerRef struct {
	Repo string `json:"repo"`
	Name string `json:"name"`
	DID  string `json:"did,omitempty"`
}

// ListRunnersOutput is the answer of MethodListRunners. Cursor, when set,
// reads the next page: pass it as the "cursor" parameter.
type ListRunnersOutput struct {
	Runners []Runner `json:"runners"`
	Cursor  string   `json:"cursor,omitempty"`
}

// MaxClaimRuns is the most runs one answer of MethodClaim carries: a
// larger ClaimInput.Max counts as this many.
const MaxClaimRuns = 100

// ClaimInput is the body of MethodClaim.
type ClaimInput struct {
	// Wait is how long the server may hold the request open, in seconds
	// (0..60; 0 answers at once).
	Wait int `json:"wait"`
	// Max is how many runs the runner can take now (its free slots,
	// 1..MaxClaimRuns; more counts as MaxClaimRuns). When it is set, the
	// answer lists the runs in ClaimOutput.Runs: as soon as one run can be
	// claimed, the server claims up to Max of the queued runs this runner
	// qualifies for, oldest first, each under a lease of its own as if
	// claimed alone. 0 (absent, as from a runner older than Max) or less
	// claims one run, answered in ClaimOutput.Run. A server older than Max
	// ignores it and answers one run in Run.
	Max int `json:"max,omitempty"`
}

// ClaimOutput is the answer of MethodClaim: nothing when no run was
// claimed within the wait; else the claimed run in Run when the request
// had no Max, or the claimed runs (1..Max, oldest first) in Runs when it
// had. ClaimOutput.Claimed reads either.
type ClaimOutput struct {
	Run  *ClaimedRun   `json:"run,omitempty"`
	Runs []*ClaimedRun `json:"runs,omitempty"`
}

// Claimed returns the runs an answer carries, from Runs and Run (nil
// when none), so that a runner that sent Max also reads the one-run
// answer of an older server.
func (o ClaimOutput) Claimed() []*ClaimedRun {
	out := make([]*ClaimedRun, 0, len(o.Runs)+1)
	if o.Run != nil {
		out = append(out, o.Run)
	}
	for _, r := range o.Runs {
		if r != nil {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// ClaimedRun is everything a runner needs to execute a run.
type ClaimedRun struct {
	Run Run `json:"run"`
	// WorkflowSource is the workflow file's bytes at the run's commit.
	WorkflowSource string `json:"workflowSource"`
	// GitURL is the repository's smart-HTTP URL, relative to the server URL
	// (e.g. "/alice/app.git").
	GitURL string `json:"gitUrl"`
	// RunToken is a credential that lets the runner fetch the repository
	// (basic-auth password, any user name) while the run is not final.
	RunToken string `json:"runToken"`
	// Secrets holds the values of the workflow-level secrets that exist for
	// the repository and this runner; a runner-scoped value wins over an
	// unscoped one of the same name. Steps receive only those they list.
	//
	// Values that are not valid UTF-8 are in SecretBytes instead (base64 in
	// JSON), since a JSON string cannot carry them; SecretValues merges both.
	Secrets map[string]string `json:"secrets,omitempty"`
	// SecretBytes holds the secrets whose values are not valid UTF-8,
	// byte-exact; a name is in Secrets or SecretBytes, never both.
	SecretBytes map[string][]byte `json:"secretBytes,omitempty"`
	// LeaseSeconds is the lease's length; renew well before it lapses.
	LeaseSeconds int `json:"leaseSeconds"`
	// CancelRequested is set (by MethodResumeRun) when a user asked to
	// cancel the run while the runner was away.
	CancelRequested bool `json:"cancelRequested,omitempty"`
	// Needs are the runs this one needs, all succeeded, in the order of
	// the workflow's `needs:` (a matrix need's runs in matrix order).
	Needs []NeededRun `json:"needs,omitempty"`
}

// NewClaimedSecrets splits secret values into the Secrets and SecretBytes
// of a ClaimedRun, so that every value travels byte-exact.
func NewClaimedSecrets(values map[string][]byte) (strs map[string]string, raw map[string][]byte) {
	for name, v := range values {
		if utf8.Valid(v) {
			if strs == nil {
				strs = map[string]string{}
			}
			strs[name] = string(v)
			continue
		}
		if raw == nil {
			raw = map[string][]byte{}
		}
		raw[name] = v
	}
	return strs, raw
}

// SecretValues returns every secret of c by name, from Secrets and
// SecretBytes (nil when there is none).
func (c *ClaimedRun) SecretValues() map[string]string {
	if len(c.Secrets) == 0 && len(c.SecretBytes) == 0 {
		return nil
	}
	out := make(map[string]string, len(c.Secrets)+len(c.SecretBytes))
	for k, v := range c.Secrets {
		out[k] = v
	}
	for k, v := range c.SecretBytes {
		out[k] = string(v)
	}
	return out
}

// StartSessionInput is the body of MethodStartSession: what the new runner
// process is, for the server's log and runner list.
type StartSessionInput struct {
	Version  string `json:"version,omitempty"`  // knotless-run's version
	Executor string `json:"executor,omitempty"` // e.g. shell, kube
	// Digest is the SHA-256 of the knotless-run executable, lower-case
	// hex: the build itself, whatever its version says (a deployment's
	// manifest pins it).
	Digest string `json:"digest,omitempty"`
	// Capacity is how many runs the process takes at once (--capacity).
	Capacity int `json:"capacity,omitempty"`
	// Facts are what the executor says of where runs go, by name (a kube
	// runner's namespace and pod), at most 16, each name and value at most
	// 200 bytes, shown as they are (api.CheckText).
	Facts map[string]string `json:"facts,omitempty"`
}

// StartSessionOutput is the answer of MethodStartSession.
type StartSessionOutput struct {
	// Session identifies the new session; send it as SessionHeader.
	Session string `json:"session"`
	// Runs are the runs the runner holds, not final, oldest first.
	Runs []HeldRun `json:"runs"`
	// LeaseSeconds is the lease's length (every held run's lease was
	// renewed to it).
	LeaseSeconds int `json:"leaseSeconds"`
	// HandoverGraceSeconds is how long runs wait for the next session
	// after MethodHandover.
	HandoverGraceSeconds int `json:"handoverGraceSeconds"`
}

// HeldRun is a run a runner holds, as MethodStartSession lists them.
type HeldRun struct {
	Run             int64  `json:"run"`
	State           string `json:"state"` // claimed or running
	CancelRequested bool   `json:"cancelRequested,omitempty"`
}

// HandoverInput is the body of MethodHandover.
type HandoverInput struct {
	// Reason is a person-readable note for the server's log ("SIGTERM").
	Reason string `json:"reason,omitempty"`
}

// HandoverOutput is the answer of MethodHandover.
type HandoverOutput struct {
	// Runs are the runs left for the next session.
	Runs []int64 `json:"runs"`
	// GraceSeconds is how long they wait for it.
	GraceSeconds int `json:"graceSeconds"`
}

// HeartbeatInput is the body of MethodHeartbeat.
type HeartbeatInput struct {
	Run int64 `json:"run"`
}

// HeartbeatOutput is the answer of MethodHeartbeat. Cancel is true once a user
// asked to cancel the run. A run that is already final answers
// ErrRunFinished instead.
type HeartbeatOutput struct {
	Cancel       bool `json:"cancel"`
	LeaseSeconds int  `json:"leaseSeconds"`
}

// UpdateStepInput is the body of MethodUpdateStep. The first update with
// State running also moves the run from claimed to running.
type UpdateStepInput struct {
	Run      int64  `json:"run"`
	Step     int    `json:"step"`
	Name     string `json:"name"`
	State    string `json:"state"`
	ExitCode *int   `json:"exitCode,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// At is when the change happened on the runner (the step's start for
	// running, its end for a final state); absent means when the server
	// receives it. A time in the server's future counts as the server's
	// now. Updates are journaled and may arrive late: At keeps them true.
	At *time.Time `json:"at,omitempty"`
}

// AppendLogOutput is the answer of MethodAppendLog: the step log's size in
// bytes after the append.
type AppendLogOutput struct {
	Size int64 `json:"size"`
}

// CompleteInput is the body of MethodComplete.
type CompleteInput struct {
	Run      int64  `json:"run"`
	State    string `json:"state"` // a final state
	Reason   string `json:"reason,omitempty"`
	Message  string `json:"message,omitempty"`
	ExitCode *int   `json:"exitCode,omitempty"`
	// Exports are the values the run's steps exported (the workflow's
	// export file, secrets masked), for the runs that need it; at most
	// MaxExports names.
	Exports map[string]string `json:"exports,omitempty"`
	// EnvironmentRemoved says the runner removed the run's environment
	// (its pod, container or processes are gone) before it reported: a
	// retry of the run may start now.
	EnvironmentRemoved bool `json:"environmentRemoved,omitempty"`
	// Caches is what the run's repository holds in the cache store the
	// runner used, after the run's restore and save (nil when the run
	// has no `caches:` or the runner keeps none): the server keeps the
	// latest report per repository and store, for `knotless repo usage`
	// and the repository's web page.
	Caches *CacheUsage `json:"caches,omitempty"`
}

// CacheUsage is one repository's caches in one cache store.
type CacheUsage struct {
	// Store names the store: "s3: ENDPOINT/BUCKET/PREFIX" for a shared
	// bucket (every runner of it reports the same name), "runner NAME:
	// disk" for a runner's own disk.
	Store string `json:"store"`
	// Entries is the number of caches (keys) and Bytes their size in
	// bytes (stored: compressed in a bucket, apparent size on a disk).
	Entries int   `json:"entries"`
	Bytes   int64 `json:"bytes"`
}

// Limits of CompleteInput.Exports (the workflow package's export file
// limits, as the server enforces them).
const (
	MaxExports       = 100
	MaxExportsBytes  = 64 << 10 // names and values together
	MaxExportNameLen = 256
)

// NeededRun is a run that a claimed run needs (`needs:`), as its runner
// receives it: the runner puts its outputs (fetched with
// MethodGetNeedOutputs and checked against Outputs.SHA256) and its
// exports into the checkout.
type NeededRun struct {
	Run      int64         `json:"run"`
	Name     string        `json:"name"` // the entry of `needs:` naming its workflow
	Workflow string        `json:"workflow"`
	Matrix   []MatrixValue `json:"matrix,omitempty"`
	// Outputs is nil when the run stored none.
	Outputs *RunOutputs       `json:"outputs,omitempty"`
	Exports map[string]string `json:"exports,omitempty"`
}

// EnvironmentsRemovedInput is the body of MethodEnvironmentsRemoved.
type EnvironmentsRemovedInput struct {
	// Keep are the runs whose environments the runner kept (it took them
	// over); every other environment it ever made is gone.
	Keep []int64 `json:"keep,omitempty"`
}

// IDTokensInput is the body of MethodIDTokens.
type IDTokensInput struct {
	Run  int64 `json:"run"`
	Step int   `json:"step"` // 1-based
	// Names are names of the step's `id-tokens:`, one or more.
	Names []string `json:"names"`
	// IssuedAt is the step's start (the At of its running update): the
	// tokens' "iat", in whole seconds. Zero means now. The server refuses
	// one more than a minute ahead of its clock or before the run's claim.
	IssuedAt time.Time `json:"issuedAt"`
}

// IDToken is one id token of IDTokensOutput.
type IDToken struct {
	Name      string    `json:"name"`
	Token     string    `json:"token"` // a JWT (RFC 7519), signed RS256
	ExpiresAt time.Time `json:"expiresAt"`
}

// IDTokensOutput is the answer of MethodIDTokens: one token per name, in
// the order asked.
type IDTokensOutput struct {
	Tokens []IDToken `json:"tokens"`
}
