package runner

import (
	"encoding/json"
	"io"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/logship"
)

// StepUpdate is a step's change of state.
type StepUpdate struct {
	Step     int    // 1-based; 0 is the setup log
	Name     string // the step's name
	State    string // api.Step* state
	ExitCode *int
	Reason   string
	Duration time.Duration // set on final states
	// At is when the change happened; zero means when it is recorded.
	At time.Time
	// RunState is set on the setup log's final update when setup is where
	// the run ended: the run's final state. Only for display (the setup
	// footer shows it, as `knotless run logs` does); it is not sent.
	RunState string
}

// Result is how a run ended.
type Result struct {
	State    string // a final api.State*
	Reason   string
	Message  string
	ExitCode *int
	// Exports are the values the steps exported (workflow.ExportFile),
	// secrets masked.
	Exports map[string]string
	// EnvironmentRemoved: no environment of the run is left (none was
	// made, or its cleanup succeeded).
	EnvironmentRemoved bool
	// Caches is what the run's repository holds in the runner's cache
	// store, for a run with `caches:` (nil otherwise).
	Caches *api.CacheUsage
}

// Reporter receives everything a run produces, in order. Log bytes it gets
// are already masked and capped. Execute calls it from one goroutine.
type Reporter interface {
	// Log opens step's log (0 = the setup log). Execute calls it once per
	// step and closes the writer before the step's final update.
	Log(step int) (logship.LogFile, error)
	// Step records a step's state change.
	Step(u StepUpdate) error
	// Done records the run's result; it is the last call.
	Done(r Result) error
}

// SpoolReporter records a run into its spool, from which a
// logship.Shipper delivers it.
type SpoolReporter struct {
	Spool *logship.Spool
}

// Log implements Reporter.
func (r SpoolReporter) Log(step int) (logship.LogFile, error) { return r.Spool.Log(step) }

// Step implements Reporter.
func (r SpoolReporter) Step(u StepUpdate) error {
	at := u.At
	if at.IsZero() {
		at = time.Now()
	}
	at = at.UTC()
	return r.Spool.Append(logship.JournalEntry{Step: &api.UpdateStepInput{
		Run: r.Spool.Run(), Step: u.Step, Name: u.Name, State: u.State, ExitCode: u.ExitCode, Reason: u.Reason, At: &at,
	}})
}

// Done implements Reporter.
func (r SpoolReporter) Done(res Result) error {
	return r.Spool.Append(logship.JournalEntry{Complete: &api.CompleteInput{
		Run: r.Spool.Run(), State: res.State, Reason: res.Reason, Message: res.Message, ExitCode: res.ExitCode,
		Exports: res.Exports, EnvironmentRemoved: res.EnvironmentRemoved, Caches: res.Caches,
	}})
}

// StoreOutputs implements OutputsSink: the archive goes into the spool and
// its journal, and the shipper uploads it before the result.
func (r SpoolReporter) StoreOutputs(write func(w io.Writer) (int, error)) (logship.OutputsRecord, error) {
	return r.Spool.WriteOutputs(write)
}

// RecordSession implements Journal.
func (r SpoolReporter) RecordSession(h executor.Handle) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return r.Spool.Append(logship.JournalEntry{Session: b})
}

// Checkpoints implements Journal.
func (r SpoolReporter) Checkpoints(step int) (*logship.CheckpointWriter, error) {
	return r.Spool.Checkpoints(step)
}

// ResumeLog implements Journal.
func (r SpoolReporter) ResumeLog(step int, size int64) (logship.LogFile, byte, error) {
	return r.Spool.ResumeLog(step, size)
}

func ptr[T any](v T) *T { return &v }
