package logship

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"

	"knotless.dev/knotless/internal/api"
)

// What a restarted runner needs to take a run over lives in the spool too,
// beside what is shipped:
//
//	journal.jsonl   Claim and Session entries (local only: never shipped)
//	step-<N>.raw    the step's last checkpoint: how many raw output bytes of
//	                the step the masked log step-<N>.log holds
//
// A log keeps masked bytes, so it cannot tell how far into the step's raw
// output it got; the checkpoint can, and the next runner process resumes
// the step's output there (executor.Step.Offset).

// ClaimRecord is what a Claim journal entry keeps of a claimed run: what
// the claim said, without the secrets and the run token (a restarted runner
// asks for those again with api.MethodResumeRun).
type ClaimRecord struct {
	Run            api.Run `json:"run"`
	WorkflowSource string  `json:"workflowSource"`
	GitURL         string  `json:"gitUrl"`
	// Workspace is the run's checkout on the runner's host (a stable path
	// per repository and workflow); "" in journals of older runners, whose
	// workspace was WORK/runs/<run>/workspace.
	Workspace string `json:"workspace,omitempty"`
	// Started is when this runner began to execute the run; the run's
	// timeout counts from it, also across restarts.
	Started time.Time `json:"started"`
}

// Checkpoint pairs a step's raw output with its masked log: the first Raw
// bytes of the step's output are exactly what the first Log bytes of
// step-<N>.log hold, masked, and Hidden says whether the last of them was
// masked (logmask.Writer.Checkpoint).
type Checkpoint struct {
	Raw    int64
	Log    int64
	Hidden bool
}

// A checkpoint file holds two slots of slotLen bytes, written in turn:
// sequence (8), raw (8), log (8), hidden (1), CRC-32C of those (4). Reading
// takes the valid slot with the higher sequence, so a write torn by a crash
// leaves the other slot's checkpoint.
const slotLen = 29

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// CheckpointWriter records one step's checkpoints.
type CheckpointWriter struct {
	f   *os.File
	seq uint64
	buf [slotLen]byte
}

func (s *Spool) checkpointPath(step int) string {
	return filepath.Join(s.dir, fmt.Sprintf("step-%d.raw", step))
}

// Checkpoints opens step's checkpoint file for writing, continuing after
// what it holds.
func (s *Spool) Checkpoints(step int) (*CheckpointWriter, error) {
	f, err := os.OpenFile(s.checkpointPath(step), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open checkpoints of run %d step %d: %w", s.run, step, err)
	}
	_, seq, _ := readCheckpoint(f)
	return &CheckpointWriter{f: f, seq: seq}, nil
}

// Save records c (not synced: a crash loses at most the latest ones, and
// an older checkpoint is as good, only resumed from further back).
func (w *CheckpointWriter) Save(c Checkpoint) error {
	w.seq++
	b := w.buf[:]
	binary.BigEndian.PutUint64(b[0:], w.seq)
	binary.BigEndian.PutUint64(b[8:], uint64(c.Raw))
	binary.BigEndian.PutUint64(b[16:], uint64(c.Log))
	b[24] = 0
	if c.Hidden {
		b[24] = 1
	}
	binary.BigEndian.PutUint32(b[25:], crc32.Checksum(b[:25], crcTable))
	_, err := w.f.WriteAt(b, int64(w.seq%2)*slotLen)
	return err
}

// Close closes the file.
func (w *CheckpointWriter) Close() error { return w.f.Close() }

func readCheckpoint(f *os.File) (Checkpoint, uint64, bool) {
	var buf [2 * slotLen]byte
	n, _ := f.ReadAt(buf[:], 0)
	var best Checkpoint
	var bestSeq uint64
	found := false
	for i := 0; i+slotLen <= n; i += slotLen {
		b := buf[i : i+slotLen]
		if binary.BigEndian.Uint32(b[25:]) != crc32.Checksum(b[:25], crcTable) {
			continue
		}
		seq := binary.BigEndian.Uint64(b[0:])
		if seq == 0 || (found && seq <= bestSeq) {
			continue
		}
		best = Checkpoint{Raw: int64(binary.BigEndian.Uint64(b[8:])), Log: int64(binary.BigEndian.Uint64(b[16:])), Hidden: b[24] == 1}
		bestSeq, found = seq, true
	}
	return best, bestSeq, found
}

// LastCheckpoint returns step's newest checkpoint; ok is false when there
// is none (the step's log is then taken as empty).
func (s *Spool) LastCheckpoint(step int) (c Checkpoint, ok bool, err error) {
	f, err := os.Open(s.checkpointPath(step))
	if errors.Is(err, os.ErrNotExist) {
		return Checkpoint{}, false, nil
	}
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("read checkpoints of run %d step %d: %w", s.run, step, err)
	}
	defer f.Close()
	c, _, ok = readCheckpoint(f)
	return c, ok, nil
}

// ResumeLog cuts step's log back to size bytes (what a checkpoint covers;
// bytes after it were written by a process that died before it could
// record them, and will be written again) and opens it for appending. It
// also returns the log's last byte (0 when empty).
func (s *Spool) ResumeLog(step int, size int64) (LogFile, byte, error) {
	f, err := os.OpenFile(s.logPath(step), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("open log of run %d step %d: %w", s.run, step, err)
	}
	fi, err := f.Stat()
	if err == nil && fi.Size() < size {
		err = fmt.Errorf("the log has %d bytes, its checkpoint says %d", fi.Size(), size)
	}
	if err == nil {
		err = f.Truncate(size)
	}
	if err == nil {
		err = s.cutTimes(step, size)
	}
	var last [1]byte
	if err == nil && size > 0 {
		_, err = f.ReadAt(last[:], size-1)
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekEnd)
	}
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("resume log of run %d step %d: %w", s.run, step, err)
	}
	// O_APPEND is not settable after open with os: reopen for appending.
	f.Close()
	w, err := s.Log(step)
	return w, last[0], err
}

// releaseUnit is the granularity, in bytes, in which releaseLog gives a
// log's space back.
const releaseUnit = 1 << 20

// releaseLog gives back the space (on disk and in the page cache) of
// step's log from byte from up to about acked, bytes the server has
// acknowledged, which nothing reads again: it punches a hole, and the log
// keeps its size (reading the hole gives zeros). Only whole releaseUnits
// below the step's last checkpoint go (a restarted runner reads the byte
// before it); a step without checkpoints keeps its log. It returns how far
// the log is released now; an error means the file system cannot do it.
func (s *Spool) releaseLog(step int, from, acked int64) (int64, error) {
	c, ok, err := s.LastCheckpoint(step)
	if err != nil || !ok {
		return from, nil
	}
	end := (min(acked, c.Log-1) / releaseUnit) * releaseUnit
	if end <= from {
		return from, nil
	}
	f, err := os.OpenFile(s.logPath(step), os.O_WRONLY, 0)
	if err != nil {
		return from, nil // gone: nothing to give back
	}
	defer f.Close()
	if err := punchHole(f, from, end-from); err != nil {
		return from, fmt.Errorf("release log of run %d step %d: %w", s.run, step, err)
	}
	return end, nil
}

// Record is what a spool's journal says of a run, for taking it over.
type Record struct {
	Claim *ClaimRecord
	// Session is the executor's handle (JSON) of the run's environment;
	// nil when the run never got one.
	Session json.RawMessage
	// Steps holds each step's latest update, by index (0 is setup).
	Steps map[int]api.UpdateStepInput
	// Started holds when each step started: the At of its first running
	// update, by index.
	Started map[int]time.Time
	// Complete is the run's result, when it has one.
	Complete *api.CompleteInput
	// Outputs is the run's outputs archive, once it was packed.
	Outputs *OutputsRecord
}

// Record reads the journal into a Record.
func (s *Spool) Record() (Record, error) {
	entries, _, err := s.Entries(0)
	if err != nil {
		return Record{}, err
	}
	r := Record{Steps: map[int]api.UpdateStepInput{}, Started: map[int]time.Time{}}
	for _, e := range entries {
		switch {
		case e.Claim != nil:
			r.Claim = e.Claim
		case len(e.Session) > 0:
			r.Session = e.Session
		case e.Step != nil:
			r.Steps[e.Step.Step] = *e.Step
			if _, seen := r.Started[e.Step.Step]; !seen && e.Step.State == api.StepRunning && e.Step.At != nil {
				r.Started[e.Step.Step] = *e.Step.At
			}
		case e.Complete != nil:
			r.Complete = e.Complete
		case e.Outputs != nil:
			r.Outputs = e.Outputs
		}
	}
	return r, nil
}

// Delivered records, in a spool rebuilt from the server's record of a run
// (a runner whose work directory was lost takes the run over), that the
// server holds every journal entry written so far and logs[step] bytes of
// each step's log: the shipper sends none of them again. Each step's log
// file is extended (sparse, never shrunk) to that size, so that bytes
// written later land at the server's offsets. Call it before the
// spool's shipper starts.
func (s *Spool) Delivered(logs map[int]int64) error {
	entries, _, err := s.Entries(0)
	if err != nil {
		return err
	}
	c := shipCursor{Entries: len(entries), Logs: map[int]int64{}}
	for step, n := range logs {
		f, err := os.OpenFile(s.logPath(step), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("open log of run %d step %d: %w", s.run, step, err)
		}
		fi, err := f.Stat()
		if err == nil && fi.Size() < n {
			err = f.Truncate(n)
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("extend log of run %d step %d to %d bytes: %w", s.run, step, n, err)
		}
		c.Logs[step] = n
	}
	return s.saveCursor(c)
}
