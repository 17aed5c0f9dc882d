package api

// NSIDs of every XRPC method the server serves. Queries (GET) are marked Q,
// procedures (POST) P. "user" methods take an account API token as
// "Authorization: Bearer <token>"; "runner" methods take an atproto
// service-auth JWT signed by the runner's key (iss = runner DID, aud = server
// DID, lxm = the method's NSID, short expiry, unique jti).
const (
	// Q, no auth. Out: DescribeServerOutput.
	MethodDescribeServer = "dev.knotless.server.describe"

	// Q, user. Out: Account.
	MethodWhoAmI = "dev.knotless.account.whoami"
	// P, admin. In: CreateAccountInput. Out: CreateAccountOutput.
	MethodCreateAccount = "dev.knotless.account.create"
	// P, admin. In: AccountRef. Out: Account. Every token of the account
	// is refused from the next request on (401 AccountDisabled) until it
	// is enabled again. An admin cannot disable their own account.
	MethodDisableAccount = "dev.knotless.account.disable"
	// P, admin. In: AccountRef. Out: Account.
	MethodEnableAccount = "dev.knotless.account.enable"

	// P, user. In: CreateTokenInput. Out: CreateTokenOutput (the new token,
	// shown this once; the server keeps only its hash).
	MethodCreateToken = "dev.knotless.token.create"
	// Q, user. Out: ListTokensOutput (the caller's tokens by name, never
	// the tokens themselves).
	MethodListTokens = "dev.knotless.token.list"
	// P, user. In: RevokeTokenInput. Out: empty. The token is refused from
	// the next request on. Revoking the account's last token is refused
	// (409 Conflict): create another first.
	MethodRevokeToken = "dev.knotless.token.revoke"

	// P, user. In: CreateRepoInput. Out: Repo.
	MethodCreateRepo = "dev.knotless.repo.create"
	// Q, user. Out: ListReposOutput (repos the caller owns; all for admins).
	MethodListRepos = "dev.knotless.repo.list"

	// Q, user. Params: repo, pipeline, limit (default 50, at most the
	// server's page cap), cursor (from the previous page). Out:
	// ListRunsOutput (newest first; Cursor set when there may be more).
	MethodListRuns = "dev.knotless.run.list"
	// Q, user. Params: run. Out: Run (with Steps).
	MethodGetRun = "dev.knotless.run.get"
	// Q, user. Params: run, step, offset, wait (seconds, 0..60). Out: raw log
	// bytes (application/octet-stream) from offset; headers LogSizeHeader and
	// LogDoneHeader. With wait > 0 the call blocks until there are bytes past
	// offset, the step's log is done, or wait elapses.
	MethodGetRunLog = "dev.knotless.run.getLog"
	// Q, user (the repository's owner or an admin). Params: run, limit
	// (default 1000, at most the server's page cap), cursor (the last path
	// of the previous page). Out: RunOutputs with Files (by path) of one
	// page. ErrNotFound when the run stored no outputs.
	MethodListOutputs = "dev.knotless.run.listOutputs"
	// Q, user (the repository's owner or an admin). Params: run. Out: the
	// run's outputs archive (application/x-tar: a tar of the workflow's
	// `outputs:` paths, as package internal/outputs describes it), with
	// OutputsSHA256Header; Range requests are served. ErrNotFound when
	// the run stored no outputs.
	MethodGetOutputs = "dev.knotless.run.getOutputs"
	// P, user. In: RunRef. Out: Run.
	MethodCancelRun = "dev.knotless.run.cancel"
	// P, user. In: TriggerInput. Out: Pipeline.
	MethodTriggerRun = "dev.knotless.run.trigger"
	// P, user (the repository's owner or an admin: who may trigger). In:
	// RerunInput. Out: Pipeline: a new pipeline of the same ref, commit
	// and event (RerunOf set, Actor the caller) with one run per run
	// again, each from its workflow file at that commit, whatever its
	// `on:` says. ErrNotFound for a run or pipeline the caller may not
	// see; 409 Conflict while the run (or a run of the pipeline) has not
	// ended, and for a pipeline whose runs all succeeded.
	MethodRerun = "dev.knotless.run.rerun"

	// P, user (owner or admin). In: SetSecretInput. Out: empty.
	MethodSetSecret = "dev.knotless.secret.set"
	// Q, user. Params: repo. Out: ListSecretsOutput (names only, never values).
	MethodListSecrets = "dev.knotless.secret.list"
	// P, user. In: DeleteSecretInput. Out: empty.
	MethodDeleteSecret = "dev.knotless.secret.delete"

	// P, runner (the JWT proves possession of the key being registered),
	// with RegistrationTokenHeader: a registration token of the repository
	// (MethodCreateRegistrationToken) or the API token of an account that
	// may manage it. In: RegisterRunnerInput. Out: Runner (status pending).
	MethodRegisterRunner = "dev.knotless.runner.register"
	// P, user (owner or admin). In: CreateRegistrationTokenInput. Out:
	// RegistrationToken (the token is shown this once).
	MethodCreateRegistrationToken = "dev.knotless.runner.createRegistrationToken"
	// Q, user. Params: repo, limit (default 100, at most the server's page
	// cap), cursor (from the previous page). Out: ListRunnersOutput (by
	// name; Cursor set when there may be more).
	MethodListRunners = "dev.knotless.runner.list"
	// P, user (owner or admin). In: RunnerRef. Out: Runner.
	MethodApproveRunner = "dev.knotless.runner.approve"
	// P, user (owner or admin). In: RunnerRef. Out: empty.
	MethodRemoveRunner = "dev.knotless.runner.remove"

	// P, runner (approved). In: ClaimInput. Out: ClaimOutput. Long-polls up
	// to ClaimInput.Wait seconds for a queued run the runner qualifies for;
	// claims one (in ClaimOutput.Run), or up to ClaimInput.Max when set (in
	// ClaimOutput.Runs), each under its own lease.
	MethodClaim = "dev.knotless.runner.claim"
	// P, runner. In: HeartbeatInput. Out: HeartbeatOutput. Renews the lease of
	// a claimed run and tells the runner whether it was cancelled.
	MethodHeartbeat = "dev.knotless.runner.heartbeat"
	// P, runner. In: UpdateStepInput. Out: empty. Idempotent.
	MethodUpdateStep = "dev.knotless.runner.updateStep"
	// P, runner. Params: run, step, offset, and optionally times
	// (LogTimesParam: when the runner saw the lines of these bytes begin).
	// Body: raw bytes (application/octet-stream). Out: AppendLogOutput.
	// Idempotent: bytes the server already holds at [offset, size) are
	// skipped, never duplicated, and so are their times. An offset past
	// the stored size fails with ErrOffsetGap and Size set.
	MethodAppendLog = "dev.knotless.runner.appendLog"
	// P, runner. Params: run, offset, size (the archive's whole length in
	// bytes), sha256 (its hex SHA-256). Body: the archive's bytes from
	// offset (application/octet-stream, at most 8 MiB per call). Out:
	// UploadOutputsOutput. Resumable and idempotent like appendLog: bytes
	// the server holds of the same archive (same size and sha256) are
	// skipped; an offset past them fails with ErrOffsetGap and Size set.
	// The call that brings the last byte verifies the SHA-256 (a mismatch
	// discards the upload: ErrOutputsCorrupt, send it again from 0) and
	// stores the archive; repeating it then answers Stored. A size past
	// the server's limit is refused before any byte is kept
	// (ErrOutputsTooLarge); another archive for a run whose outputs are
	// stored is ErrConflict.
	MethodUploadOutputs = "dev.knotless.runner.uploadOutputs"
	// P, runner. In: CompleteInput. Out: empty. Records the final state once;
	// repeating the same call succeeds, a different final state is
	// ErrRunFinished.
	MethodComplete = "dev.knotless.runner.complete"

	// P, runner (approved; no SessionHeader needed). In: StartSessionInput.
	// Out: StartSessionOutput. Opens a new session of the runner identity,
	// which supersedes every earlier one: from then on the server refuses
	// runner calls that carry an older session (ErrSessionSuperseded), so
	// two processes with one credential never both run jobs. The answer
	// lists the runs the runner holds (claimed or running); their leases are
	// renewed, so a restarted runner can take them over at once, without
	// waiting for a lease to lapse.
	MethodStartSession = "dev.knotless.runner.startSession"
	// P, runner. In: HandoverInput. Out: HandoverOutput. The session stops
	// (it claims no more) and leaves its runs to the runner's next session:
	// their leases are extended to the server's handover grace, after which
	// runs no session took over end errored/runner-lost (the message says
	// they were handed over). Later calls with the session, a second
	// handover included, get ErrSessionSuperseded.
	MethodHandover = "dev.knotless.runner.handover"
	// P, runner. In: RunRef. Out: ClaimedRun. For a run this runner holds
	// and that is not final: what a claim gave (the workflow, the secrets
	// anew, a new run token that replaces the old one), the run's steps as
	// the server recorded them (Run.Steps, with their log sizes) and
	// whether a cancel was requested; the lease is renewed. A restarted runner calls it for
	// each run it recovers. ErrRunFinished when the run is final, Forbidden
	// when another runner holds it, NotFound when there is no such run. The
	// old run token stops working (git fetch) at once.
	MethodResumeRun = "dev.knotless.runner.resumeRun"
	// P, runner. Params: run (a run the runner holds), need (a run it
	// needs, ClaimedRun.Needs). Out: need's outputs archive
	// (application/x-tar) with OutputsSHA256Header. Forbidden when the
	// runner does not hold run, NotFound when need is not one of run's
	// needs or stored no outputs.
	MethodGetNeedOutputs = "dev.knotless.runner.getNeedOutputs"
	// P, runner. In: EnvironmentsRemovedInput. Out: empty. The runner
	// removed every environment it made (Executor.Sweep at its start)
	// but those of the runs in Keep: the retries of its ended runs that
	// waited for their environments to be gone may start.
	MethodEnvironmentsRemoved = "dev.knotless.runner.environmentsRemoved"
	// P, runner. In: IDTokensInput. Out: IDTokensOutput. The id tokens
	// (OpenID Connect, signed by the server: docs/oidc.md) that step Step
	// of a run this runner holds lists in its `id-tokens:`, issued at
	// IssuedAt, the step's start. Asked when the step starts, never at
	// claim. The same input gives the same tokens, byte for byte (a
	// runner that took the run over asks again to mask them). Forbidden
	// when another runner holds the run, its lease lapsed, or the step
	// does not list a name; ErrRunFinished when the run is final.
	MethodIDTokens = "dev.knotless.runner.idTokens"
)

// SessionHeader carries the runner's session (StartSessionOutput.Session)
// on every runner call but register and startSession.
const SessionHeader = "Knotless-Runner-Session"

// RegistrationTokenHeader carries the credential of MethodRegisterRunner:
// a registration token (MethodCreateRegistrationToken) or an API token of
// an account that may manage the repository. It is a header, never a URL
// parameter, so that it stays out of logs.
const RegistrationTokenHeader = "Knotless-Registration-Token"

// Headers of MethodGetRunLog responses.
const (
	// LogSizeHeader is the step log's total stored size in bytes.
	LogSizeHeader = "Knotless-Log-Size"
	// LogDoneHeader is "true" when the step's log will not grow any more.
	LogDoneHeader = "Knotless-Log-Done"
)

// OutputsSHA256Header carries the hex SHA-256 of the whole archive on
// MethodGetOutputs answers.
const OutputsSHA256Header = "Knotless-Outputs-Sha256"

// XRPC error names (the "error" field) used by the server.
const (
	ErrInvalidRequest  = "InvalidRequest"         // 400
	ErrAuthRequired    = "AuthenticationRequired" // 401
	ErrExpiredToken    = "ExpiredToken"           // 401
	ErrInvalidToken    = "InvalidToken"           // 401
	ErrAccountDisabled = "AccountDisabled"        // 401
	ErrForbidden       = "Forbidden"              // 403
	ErrNotFound        = "NotFound"               // 404
	ErrConflict        = "Conflict"               // 409
	ErrOffsetGap       = "OffsetGap"              // 409, Size set
	ErrRunFinished     = "RunFinished"            // 409
	ErrNotApproved     = "RunnerNotApproved"      // 403
	// ErrSessionSuperseded (409): a newer session of the same runner
	// identity was started (another knotless-run process with the same
	// state file), or the caller's session handed its runs over; the
	// caller must stop at once, touching nothing.
	ErrSessionSuperseded = "SessionSuperseded"
	// ErrSessionRequired (400): a runner call without SessionHeader (a
	// knotless-run from before sessions).
	ErrSessionRequired = "SessionRequired"
	// ErrOutputsTooLarge (413): a run's outputs archive is larger than the
	// server's --max-outputs-size; the message says both sizes.
	ErrOutputsTooLarge = "OutputsTooLarge"
	// ErrOutputsCorrupt (422): the outputs archive that arrived does not
	// have the SHA-256 the runner declared (or is no valid tar); the
	// server discarded it, the runner sends it again from offset 0.
	ErrOutputsCorrupt = "OutputsCorrupt"
	ErrNotImplemented = "MethodNotImplemented" // 501
	ErrInternal       = "InternalServerError"  // 500
)
