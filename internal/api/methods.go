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

	// P, user. In: CreateRepoInput. Out: Repo.
	MethodCreateRepo = "dev.knotless.repo.create"
	// Q, user. Out: ListReposOutput (repos the caller owns; all for admins).
	MethodListRepos = "dev.knotless.repo.list"

	// Q, user. Params: repo, pipeline, limit. Out: ListRunsOutput (newest first).
	MethodListRuns = "dev.knotless.run.list"
	// Q, user. Params: run. Out: Run (with Steps).
	MethodGetRun = "dev.knotless.run.get"
	// Q, user. Params: run, step, offset, wait (seconds, 0..60). Out: raw log
	// bytes (application/octet-stream) from offset; headers LogSizeHeader and
	// LogDoneHeader. With wait > 0 the call blocks until there are bytes past
	// offset, the step's log is done, or wait elapses.
	MethodGetRunLog = "dev.knotless.run.getLog"
	// P, user. In: RunRef. Out: Run.
	MethodCancelRun = "dev.knotless.run.cancel"
	// P, user. In: TriggerInput. Out: Pipeline.
	MethodTriggerRun = "dev.knotless.run.trigger"

	// P, user (owner or admin). In: SetSecretInput. Out: empty.
	MethodSetSecret = "dev.knotless.secret.set"
	// Q, user. Params: repo. Out: ListSecretsOutput (names only, never values).
	MethodListSecrets = "dev.knotless.secret.list"
	// P, user. In: DeleteSecretInput. Out: empty.
	MethodDeleteSecret = "dev.knotless.secret.delete"

	// P, runner (the JWT proves possession of the key being registered).
	// In: RegisterRunnerInput. Out: Runner (status pending).
	MethodRegisterRunner = "dev.knotless.runner.register"
	// Q, user. Params: repo. Out: ListRunnersOutput.
	MethodListRunners = "dev.knotless.runner.list"
	// P, user (owner or admin). In: RunnerRef. Out: Runner.
	MethodApproveRunner = "dev.knotless.runner.approve"
	// P, user (owner or admin). In: RunnerRef. Out: empty.
	MethodRemoveRunner = "dev.knotless.runner.remove"

	// P, runner (approved). In: ClaimInput. Out: ClaimOutput. Long-polls up
	// to ClaimInput.Wait seconds for a queued run the runner qualifies for.
	MethodClaim = "dev.knotless.runner.claim"
	// P, runner. In: HeartbeatInput. Out: HeartbeatOutput. Renews the lease of
	// a claimed run and tells the runner whether it was cancelled.
	MethodHeartbeat = "dev.knotless.runner.heartbeat"
	// P, runner. In: UpdateStepInput. Out: empty. Idempotent.
	MethodUpdateStep = "dev.knotless.runner.updateStep"
	// P, runner. Params: run, step, offset. Body: raw bytes
	// (application/octet-stream). Out: AppendLogOutput. Idempotent: bytes the
	// server already holds at [offset, size) are skipped, never duplicated.
	// An offset past the stored size fails with ErrOffsetGap and Size set.
	MethodAppendLog = "dev.knotless.runner.appendLog"
	// P, runner. In: CompleteInput. Out: empty. Records the final state once;
	// repeating the same call succeeds, a different final state is
	// ErrRunFinished.
	MethodComplete = "dev.knotless.runner.complete"
)

// Headers of MethodGetRunLog responses.
const (
	// LogSizeHeader is the step log's total stored size in bytes.
	LogSizeHeader = "Knotless-Log-Size"
	// LogDoneHeader is "true" when the step's log will not grow any more.
	LogDoneHeader = "Knotless-Log-Done"
)

// XRPC error names (the "error" field) used by the server.
const (
	ErrInvalidRequest = "InvalidRequest"         // 400
	ErrAuthRequired   = "AuthenticationRequired" // 401
	ErrExpiredToken   = "ExpiredToken"           // 401
	ErrInvalidToken   = "InvalidToken"           // 401
	ErrForbidden      = "Forbidden"              // 403
	ErrNotFound       = "NotFound"               // 404
	ErrConflict       = "Conflict"               // 409
	ErrOffsetGap      = "OffsetGap"              // 409, Size set
	ErrRunFinished    = "RunFinished"            // 409
	ErrNotApproved    = "RunnerNotApproved"      // 403
	ErrNotImplemented = "MethodNotImplemented"   // 501
	ErrInternal       = "InternalServerError"    // 500
)
