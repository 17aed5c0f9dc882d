package testenv

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestTestNames_StateWhatHoldsNotTheFailure holds the rule of
// docs/development.md ("How the tests are written"): a test's name states
// the property that holds (TestKube_StepPastTheMemoryLimitEndsOOMKilled)
// and the failure it pins goes in its comment. It pins names that state
// the failure (TestKube_OOMKilledReadAsExitCode,
// TestKube_RunnerServiceAccountCanReadSecrets: a passing test that reads
// like an alarm): every Test function of every *_test.go of the
// repository (test/cluster's module too) is read, none may use a failure
// phrase of failurePhrases unless a negation says it does not happen
// (NothingElseLeaks, DoesNotCrash, LosesNothing).
func TestTestNames_StateWhatHoldsNotTheFailure(t *testing.T) {
	root := repoRoot(t)
	names := testNames(t, root)
	if len(names) < 100 {
		t.Fatalf("read only %d test names under %s: the walk missed the tests", len(names), root)
	}
	var bad []string
	for _, n := range names {
		if why := failureIn(n.name); why != "" {
			bad = append(bad, n.file+": "+n.name+" ("+why+")")
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d test names state the failure, not the property that holds; "+
			"rename each after what holds and say the failure it pins in its comment "+
			"(docs/development.md, How the tests are written):\n  %s", len(bad), strings.Join(bad, "\n  "))
	}
}

// TestFailureIn_TellsFailurePhrasesFromTheirNegations pins failureIn on
// names of both kinds, each taken from this repository's history.
func TestFailureIn_TellsFailurePhrasesFromTheirNegations(t *testing.T) {
	failures := []string{
		"TestKube_ExitCodeLost",
		"TestKube_OOMKilledReadAsExitCode",
		"TestKube_MissingImageHangs",
		"TestKube_UnschedulablePodWaitsForever",
		"TestKube_PodDeletedMidStepReadAsSuccess",
		"TestKube_BackgroundProcessHoldsStepOpen",
		"TestKube_CancelledRunLeavesPod",
		"TestKube_PodOutlivesRun",
		"TestKube_KilledRunnerLeaksPod",
		"TestKube_KilledExecLeavesRunningPod",
		"TestKube_PodMissingAHardeningField",
		"TestKube_RunAsVariantNotApplied",
		"TestKube_RunnerServiceAccountCanReadSecrets",
		"TestKube_JobImageWithoutTarCannotRun",
		"TestKube_SecretLeaksOrIsMangled",
		"TestKube_StreamCutMidOutputRepeatsOrLosesLines",
		"TestRunsc_CannotRunASandboxOnThisMachine",
	}
	for _, n := range failures {
		if failureIn(n) == "" {
			t.Errorf("failureIn(%s) found nothing; it states a failure", n)
		}
	}
	holds := []string{
		"TestE2E_EnvPassGivesProxyVariablesAndNothingElseLeaks",
		"TestLeaseSweep_RepositoryStoredUnderANameTodaysRuleRefusesDoesNotCrashTheServer",
		"TestServer_PushSpoolIsRemovedWhenThePusherHangsUpMidBody",
		"TestBrowser_ReconnectMidLogNeitherRepeatsNorLosesLines",
		"TestShell_StreamCutAtRandomBytesLosesAndRepeatsNothing",
		"TestKube_StepThatRemovesTheAgentsFilesLosesNothing",
		"TestE2E_KubeJobPodGoneDuringTheHandoverEndsPodLost",
		"TestE2E_RunnerLostRunIsRetriedOnceItsEnvironmentIsSwept",
		"TestE2E_KubeRunnerKilledThenRestartedLeavesNoPod",
		"TestLimits_LongPollAfterABodyOutlivesTheBodyDeadline",
		"TestKube_Arm64OnlyImageFailsFastNamingTheArchitecture",
		"TestRun_MissingAgentIsRefusedAtStart",
		"TestWeb_StrangerCannotCancelRun",
		"TestParse_ServicesReadAsWritten",
		"TestServer_SpoolsLeftByACrashAreRemovedAtStart",
		"TestKube_StepPastTheMemoryLimitEndsOOMKilled",
		"TestKube_RunnerServiceAccountMayOnlyRunPodsInItsNamespace",
	}
	for _, n := range holds {
		if why := failureIn(n); why != "" {
			t.Errorf("failureIn(%s) = %q; it states what holds", n, why)
		}
	}
}

// failurePhrases are the phrases that, in a test's name, state a failure.
// A phrase right after a negation (notAfter: the CamelCase word before it)
// or before a word that makes it something else (notBefore) is not one.
var failurePhrases = []struct {
	re        *regexp.Regexp
	notAfter  []string
	notBefore []string
}{
	{re: regexp.MustCompile(`Leaks?`), notAfter: negations},
	{re: regexp.MustCompile(`Hangs?`), notAfter: negations, notBefore: []string{"Up"}},
	{re: regexp.MustCompile(`Forever|ForEver`)},
	{re: regexp.MustCompile(`ReadAs(Success|ExitCode|Cancelled)`)},
	{re: regexp.MustCompile(`RepeatsOrLoses|LosesOrRepeats`)},
	// Pod-lost and runner-lost are reasons a run ends with.
	{re: regexp.MustCompile(`Lost`), notAfter: []string{"Pod", "Runner"}},
	{re: regexp.MustCompile(`(Can|May)(Read|Write|Reach|See|Escape)`), notAfter: negations},
	{re: regexp.MustCompile(`Mangled|NotApplied|Breaks`), notAfter: negations},
	{re: regexp.MustCompile(`Crashes`), notAfter: negations},
	{re: regexp.MustCompile(`[a-z]Missing(A|An|The)[A-Z]`)},
	{re: regexp.MustCompile(`Holds(The)?StepOpen|Outlives(The)?Run$`)},
	{re: regexp.MustCompile(`Leaves(Running)?(Pod|Container|Process)(es|s)?$`)},
	{re: regexp.MustCompile(`CannotRun$`)},
	{re: regexp.MustCompile(`_Cannot[A-Z]`)},
}

// negations are the words that, right before a failure phrase, say it
// does not happen.
var negations = []string{"Never", "Not", "No", "Nothing", "Else", "Neither", "Nor", "Without"}

var camelWords = regexp.MustCompile(`[A-Z][a-z0-9]*`)

// failureIn returns the failure phrase name uses, or "" if none.
func failureIn(name string) string {
	for _, p := range failurePhrases {
	matches:
		for _, m := range p.re.FindAllStringIndex(name, -1) {
			phrase := strings.TrimLeft(name[m[0]:m[1]], "_abcdefghijklmnopqrstuvwxyz")
			if strings.HasSuffix(p.re.String(), "[A-Z]") {
				phrase = phrase[:len(phrase)-1] // the next word's first letter
			}
			before := camelWords.FindAllString(name[:m[1]-len(phrase)], -1)
			if len(before) > 0 {
				for _, w := range p.notAfter {
					if before[len(before)-1] == w {
						continue matches
					}
				}
			}
			after := camelWords.FindString(name[m[1]:])
			for _, w := range p.notBefore {
				if after == w {
					continue matches
				}
			}
			return phrase
		}
	}
	return ""
}

type testName struct{ file, name string }

var testFunc = regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]*)\(`)

// testNames reads the Test functions of every *_test.go under root, but
// TestMain and the TestHelper* functions a test runs as a subprocess.
func testNames(t *testing.T, root string) []testName {
	t.Helper()
	var names []testName
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") || n == "testdata" || n == "vendor" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, m := range testFunc.FindAllStringSubmatch(string(b), -1) {
			if m[1] == "TestMain" || strings.HasPrefix(m[1], "TestHelper") {
				continue
			}
			names = append(names, testName{rel, m[1]})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(names, func(i, j int) bool { return names[i].file+names[i].name < names[j].file+names[j].name })
	return names
}

// repoRoot is the directory of the repository's go.mod, above this
// package's.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module knotless.dev/knotless\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod of knotless.dev/knotless above the test's directory")
		}
		dir = parent
	}
}
