package storetest

import (
	"database/sql"
	"testing"

	"knotless.dev/knotless/internal/store"
)

// Opener returns a new, empty store for one test and closes it when the
// test ends (t.Cleanup).
type Opener func(t *testing.T) store.Store

// rawSQL is what a store on an SQL database offers the tests that check a
// table directly (sqlstore.DB has it).
type rawSQL interface{ SQL() *sql.DB }

// Replicas returns two stores on one new, empty database, as two server
// replicas (two processes) hold them, and closes both when the test ends.
type Replicas func(t *testing.T) (a, b store.Store)

// Backend is how the suite gets stores of one implementation.
type Backend struct {
	Open     Opener
	Replicas Replicas
}

// Run runs every test of the suite as a subtest of t, each against new
// stores of b. Every implementation of store.Store passes it; a test here
// pins behaviour the server relies on, whatever the database.
func Run(t *testing.T, b Backend) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, b.Open) })
	}
	for _, tc := range replicaTests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, b.Replicas) })
	}
}

var tests = []struct {
	name string
	fn   func(*testing.T, Opener)
}{
	{"ClaimRun_WaitsForTheOlderRunOfItsConcurrencyGroup", testClaimRun_WaitsForTheOlderRunOfItsConcurrencyGroup},
	{"CreatePipeline_CancelInProgressSupersedesOlderRunsOfTheGroup", testCreatePipeline_CancelInProgressSupersedesOlderRunsOfTheGroup},
	{"Outputs_RecordedOnceListedByPathAndDeletedWithTheRun", testOutputs_RecordedOnceListedByPathAndDeletedWithTheRun},
	{"CreatePipeline_KeepsTheCommitBeforeThePushAndTheActor", testCreatePipeline_KeepsTheCommitBeforeThePushAndTheActor},
	{"StartSession_RenewsHeldLeasesAndListsThemOldestFirst", testStartSession_RenewsHeldLeasesAndListsThemOldestFirst},
	{"HandOver_ExtendsLeasesEndsSessionAndALapseSaysHandedOver", testHandOver_ExtendsLeasesEndsSessionAndALapseSaysHandedOver},
	{"StartSession_AfterHandoverClearsItAndALapseIsPlainRunnerLost", testStartSession_AfterHandoverClearsItAndALapseIsPlainRunnerLost},
	{"ClaimRun_EndedSessionClaimsNothing", testClaimRun_EndedSessionClaimsNothing},
	{"RotateRunToken_OldTokenStopsAtOnce", testRotateRunToken_OldTokenStopsAtOnce},
	{"ExtendLeases_NeverShortensAHandoverGrace", testExtendLeases_NeverShortensAHandoverGrace},
	{"Accounts_UniqueHandleAndTokenLookup", testAccounts_UniqueHandleAndTokenLookup},
	{"ClaimRun_ConcurrentClaimsOneWins", testClaimRun_ConcurrentClaimsOneWins},
	{"CompleteRun_OnceAndClearsToken", testCompleteRun_OnceAndClearsToken},
	{"ExpireLeases_LapsedRunsEndWithReason", testExpireLeases_LapsedRunsEndWithReason},
	{"RegisterRunner_NameAndDIDAreUnique", testRegisterRunner_NameAndDIDAreUnique},
	{"Secrets_ScopesAndListWithoutCiphertext", testSecrets_ScopesAndListWithoutCiphertext},
	{"UpdateStep_StartsRunAndNeverRegressesFinalStep", testUpdateStep_StartsRunAndNeverRegressesFinalStep},
	{"ExpireLeases_StepsLeftRunningOrPendingAreEnded", testExpireLeases_StepsLeftRunningOrPendingAreEnded},
	{"CompleteRun_StepsTheRunnerNeverEndedAreEnded", testCompleteRun_StepsTheRunnerNeverEndedAreEnded},
	{"CancelRun_QueuedRunsStepsEnd", testCancelRun_QueuedRunsStepsEnd},
	{"UpdateStep_AfterRunEndsFinalIsRecordedNonFinalIgnored", testUpdateStep_AfterRunEndsFinalIsRecordedNonFinalIgnored},
	{"Token_ExpiryDisabledAndLastUsedAtMostEveryMinute", testToken_ExpiryDisabledAndLastUsedAtMostEveryMinute},
	{"WebSession_ExpiredOrDeletedIsNotFound", testWebSession_ExpiredOrDeletedIsNotFound},
	{"ListPipelines_NewestFirstInPages", testListPipelines_NewestFirstInPages},
	{"ListPipelines_FiltersByBranchCommitStateAndWorkflow", testListPipelines_FiltersByBranchCommitStateAndWorkflow},
	{"RunnerProcess_KeepsDigestCapacityAndFacts", testRunnerProcess_KeepsDigestCapacityAndFacts},
	{"Counts_RunsByStateAndReasonAndRunnersOnline", testCounts_RunsByStateAndReasonAndRunnersOnline},
	{"Needs_RunWaitsUntilEveryNeedSucceeded", testNeeds_RunWaitsUntilEveryNeedSucceeded},
	{"Needs_FailedNeedSkipsDependentsTransitively", testNeeds_FailedNeedSkipsDependentsTransitively},
	{"Retry_ErroredRunGetsANewAttemptOnceItsEnvironmentIsGone", testRetry_ErroredRunGetsANewAttemptOnceItsEnvironmentIsGone},
	{"Retry_LostRunnersRetryWaitsForItsSweepOrTheTimeout", testRetry_LostRunnersRetryWaitsForItsSweepOrTheTimeout},
	{"FailFast_FailedMatrixRunCancelsItsSiblings", testFailFast_FailedMatrixRunCancelsItsSiblings},
	{"CreatePipeline_KeepsMatrixRetryAndExports", testCreatePipeline_KeepsMatrixRetryAndExports},
}

var replicaTests = []struct {
	name string
	fn   func(*testing.T, Replicas)
}{
	{"ClaimRun_TwoReplicasClaimEachRunOnce", testClaimRun_TwoReplicasClaimEachRunOnce},
	{"EndRun_TwoReplicasEndEachRunOnce", testEndRun_TwoReplicasEndEachRunOnce},
	{"RecordJTI_SeenByEveryReplicaUntilPruned", testRecordJTI_SeenByEveryReplicaUntilPruned},
}
