package logship

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/cleanup"
)

// Spool is the on-disk record of one run on the runner: one log file per
// step and a journal of step updates ending with the run's result. Writers
// (the run) only append; a shipper reads and delivers it to the server, so
// nothing is lost while the server is unreachable or the runner restarts.
//
// Files in the spool directory:
//
//	step-<N>.log    the masked log bytes of step N (0 = setup), append-only
//	step-<N>.times  when its lines began (api.LineTime records; times.go)
//	step-<N>.raw    the step's last checkpoint (resume.go)
//	journal.jsonl   one JournalEntry per line, append-only
//	outputs.tar     the run's outputs archive (package outputs), once packed
//	shipped.json    the cursor of what the server acknowledged (shipCursor)
//	reserve         disk space held back for the run's last words (ReserveFile)
//
// A Spool is safe for concurrent use.
type Spool struct {
	dir string
	run int64

	mu       sync.Mutex
	journal  *os.File // nil once closed or for spools opened read-only
	notify   chan struct{}
	appended chan struct{}

	cursor    *os.File // shipped.json, once saveCursor opened it
	cursorLen int      // the longest cursor written to it
}

// JournalEntry is one line of a spool's journal: a step update or the run's
// final result (always the last entry), which are shipped, or a local entry
// for a restarted runner (Claim, Session; see resume.go), which is not.
type JournalEntry struct {
	Step     *api.UpdateStepInput `json:"step,omitempty"`
	Complete *api.CompleteInput   `json:"complete,omitempty"`
	// Claim is the run as claimed (the first entry).
	Claim *ClaimRecord `json:"claim,omitempty"`
	// Session is the executor.Handle of the run's environment, as JSON,
	// once it was prepared.
	Session json.RawMessage `json:"session,omitempty"`
	// Outputs is the run's outputs archive in the spool (WriteOutputs),
	// uploaded before any later entry is shipped.
	Outputs *OutputsRecord `json:"outputs,omitempty"`
}

// OutputsRecord describes a run's outputs archive in its spool.
type OutputsRecord struct {
	File    string `json:"file"`    // its name in the spool directory
	Size    int64  `json:"size"`    // bytes
	SHA256  string `json:"sha256"`  // hex
	Entries int    `json:"entries"` // files, directories and symbolic links
}

// OutputsFile is the outputs archive's name in a spool directory.
const OutputsFile = "outputs.tar"

// WriteOutputs makes the run's outputs archive in the spool: write writes
// it and says how many entries it holds; the file is synced, then recorded in the
// journal with its size and SHA-256 (an Outputs entry), so that the
// shipper uploads it before every later entry, the result included. A
// failed write leaves no file and no entry.
func (s *Spool) WriteOutputs(write func(w io.Writer) (entries int, err error)) (OutputsRecord, error) {
	p := filepath.Join(s.dir, OutputsFile)
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return OutputsRecord{}, fmt.Errorf("create outputs archive of run %d: %w", s.run, err)
	}
	h := sha256.New()
	cw := &countingWriter{w: io.MultiWriter(f, h)}
	entries, err := write(cw)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return OutputsRecord{}, fmt.Errorf("write outputs archive of run %d: %w", s.run, err)
	}
	rec := OutputsRecord{File: OutputsFile, Size: cw.n, SHA256: hex.EncodeToString(h.Sum(nil)), Entries: entries}
	if err := s.Append(JournalEntry{Outputs: &rec}); err != nil {
		return OutputsRecord{}, err
	}
	return rec, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// JournalFile is the journal's file name in a spool directory.
const JournalFile = "journal.jsonl"

const cursorName = "shipped.json"

// CreateSpool makes the spool of run under root (root/<run>). It fails if
// one exists already.
func CreateSpool(root string, run int64) (*Spool, error) {
	dir := filepath.Join(root, strconv.FormatInt(run, 10))
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("create spool of run %d: %w", run, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create spool of run %d: %w", run, err)
	}
	return openSpool(dir, run)
}

// OpenSpool opens the spool an earlier process left at dir (root/<run>). A
// journal line torn by a crash is ended, so later entries stay readable.
func OpenSpool(dir string) (*Spool, error) {
	run, err := strconv.ParseInt(filepath.Base(dir), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("spool %s: not named after a run", dir)
	}
	s, err := openSpool(dir, run)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(dir, JournalFile))
	if err == nil && len(data) > 0 && data[len(data)-1] != '\n' {
		_, err = s.journal.Write([]byte("\n"))
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("open journal of run %d: %w", run, err)
	}
	return s, nil
}

func openSpool(dir string, run int64) (*Spool, error) {
	f, err := os.OpenFile(filepath.Join(dir, JournalFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open journal of run %d: %w", run, err)
	}
	s := &Spool{dir: dir, run: run, journal: f, notify: make(chan struct{}, 1), appended: make(chan struct{}, 1)}
	s.makeReserve()
	return s, nil
}

// ReserveFile holds disk space a spool keeps back for when its disk is
// full: FreeReserve gives it up so that the journal's last entries (the
// steps' states, the run's result) and the markers of lost log bytes still
// fit.
const ReserveFile = "reserve"

// ReserveBytes is the size of ReserveFile.
const ReserveBytes = 128 << 10

// makeReserve makes ReserveFile, if it can (a disk too full for it is
// found out later).
func (s *Spool) makeReserve() {
	p := filepath.Join(s.dir, ReserveFile)
	if _, err := os.Stat(p); err == nil {
		return
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return
	}
	err = preallocate(f, ReserveBytes)
	if err != nil {
		// No fallocate on this file system: write it out instead.
		_, err = f.Write(make([]byte, ReserveBytes))
	}
	f.Close()
	if err != nil {
		_ = os.Remove(p)
	}
}

// FreeReserve gives up the disk space the spool kept back (ReserveFile),
// for a write that failed because the disk is full. It reports whether
// there was any to give.
func (s *Spool) FreeReserve() bool {
	return os.Remove(filepath.Join(s.dir, ReserveFile)) == nil
}

// Run is the run's ID.
func (s *Spool) Run() int64 { return s.run }

// Dir is the spool's directory.
func (s *Spool) Dir() string { return s.dir }

// Changed is signalled (coalesced) whenever bytes or entries were added.
func (s *Spool) Changed() <-chan struct{} { return s.notify }

// Appended is signalled (coalesced) whenever an entry was added to the
// journal.
func (s *Spool) Appended() <-chan struct{} { return s.appended }

func (s *Spool) poke() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *Spool) logPath(step int) string {
	return filepath.Join(s.dir, fmt.Sprintf("step-%d.log", step))
}

// LogFile is one step's log as a run's recorder keeps it: bytes are
// appended, and FreeReserve gives up the space kept back for the marker of
// lost bytes (a spool's reserve), reporting whether there was any.
type LogFile interface {
	io.WriteCloser
	FreeReserve() bool
}

// Log opens step's log file for appending. Every write is on disk (in the
// page cache) before it returns and wakes the shipper; a write that
// begins a line records when (times.go).
func (s *Spool) Log(step int) (LogFile, error) {
	f, err := os.OpenFile(s.logPath(step), os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open log of run %d step %d: %w", s.run, step, err)
	}
	return &spoolLog{f: f, s: s, times: s.openTimes(step, f)}, nil
}

type spoolLog struct {
	f     *os.File
	s     *Spool
	times *lineTimes // nil when the times file cannot be written
}

func (l *spoolLog) Write(p []byte) (int, error) {
	// The line time goes first, so that the shipper never reads bytes
	// whose time is not recorded yet (it sends the two together).
	l.times.writing(p, time.Now())
	n, err := l.f.Write(p)
	l.times.wrote(p[:n])
	if n > 0 {
		l.s.poke()
	}
	return n, err
}

func (l *spoolLog) Close() error {
	l.times.close()
	return l.f.Close()
}

// FreeReserve is the spool's FreeReserve: a step's log uses it to write the
// marker of bytes it lost to a full disk.
func (l *spoolLog) FreeReserve() bool { return l.s.FreeReserve() }

// Append adds an entry to the journal. A Complete entry closes the journal:
// later appends fail.
func (s *Spool) Append(e JournalEntry) error {
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode journal entry of run %d: %w", s.run, err)
	}
	line = append(line, '\n')
	// A full disk may have room again in a moment: the shipper gives
	// back the space of log bytes it delivered. The journal holds the
	// steps' states and the run's result, so the write is tried again for
	// a while instead of being dropped.
	deadline := time.Now().Add(AppendNoSpaceWait)
	for {
		err = s.append(line, e)
		if err == nil || !NoSpace(err) || time.Now().After(deadline) {
			return err
		}
		if !s.FreeReserve() {
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// AppendNoSpaceWait is how long Append tries again while the disk is full.
var AppendNoSpaceWait = 10 * time.Second

// NoSpace reports whether err says the disk (or the user's quota) is full.
func NoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

func (s *Spool) append(line []byte, e JournalEntry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.journal == nil {
		return fmt.Errorf("journal of run %d is closed", s.run)
	}
	var size int64 = -1
	if fi, err := s.journal.Stat(); err == nil {
		size = fi.Size()
	}
	if n, err := s.journal.Write(line); err != nil {
		if n > 0 && size >= 0 {
			// No half entry: the next append must start a line.
			_ = s.journal.Truncate(size)
		}
		return fmt.Errorf("append to journal of run %d: %w", s.run, err)
	}
	if e.Complete != nil {
		// The result is the one record a person must never lose.
		err := s.journal.Sync()
		s.journal.Close()
		s.journal = nil
		if err != nil {
			return fmt.Errorf("sync journal of run %d: %w", s.run, err)
		}
	}
	s.poke()
	select {
	case s.appended <- struct{}{}:
	default:
	}
	return nil
}

// Close releases the journal without completing it.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.journal == nil {
		return nil
	}
	err := s.journal.Close()
	s.journal = nil
	return err
}

// Entries reads the journal's complete lines from byte offset off and
// returns them with the offset after the last one read. A torn last line (a
// crash mid-write) is left for a later call.
func (s *Spool) Entries(off int64) ([]JournalEntry, int64, error) {
	f, err := os.Open(filepath.Join(s.dir, JournalFile))
	if err != nil {
		return nil, off, fmt.Errorf("read journal of run %d: %w", s.run, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.NewSectionReader(f, off, 1<<40))
	if err != nil {
		return nil, off, fmt.Errorf("read journal of run %d: %w", s.run, err)
	}
	var out []JournalEntry
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		line := data[:i]
		data = data[i+1:]
		off += int64(i + 1)
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var e JournalEntry
		if err := json.Unmarshal(line, &e); err != nil {
			// A line torn by a crash and ended by the next process: it
			// carried nothing that was acknowledged, skip it.
			continue
		}
		out = append(out, e)
	}
	return out, off, nil
}

// Completed reports whether the journal holds the run's result.
func (s *Spool) Completed() (bool, error) {
	entries, _, err := s.Entries(0)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if e.Complete != nil {
			return true, nil
		}
	}
	return false, nil
}

// Steps lists the step indexes that have a log file, ascending.
func (s *Spool) Steps() ([]int, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("list spool of run %d: %w", s.run, err)
	}
	var steps []int
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "step-") || !strings.HasSuffix(name, ".log") {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(name, "step-"), ".log"))
		if err == nil && n >= 0 {
			steps = append(steps, n)
		}
	}
	sort.Ints(steps)
	return steps, nil
}

// shipCursor is what the server acknowledged: the number of journal entries
// and the log bytes per step. Being behind the server is harmless (appends
// are idempotent); it is only ever written after an acknowledgement.
type shipCursor struct {
	Entries int           `json:"entries"`
	Logs    map[int]int64 `json:"logs"`
	// Outputs is how many bytes of the outputs archive the server holds.
	Outputs int64 `json:"outputs,omitempty"`
}

func (s *Spool) loadCursor() (shipCursor, error) {
	c := shipCursor{Logs: map[int]int64{}}
	data, err := os.ReadFile(filepath.Join(s.dir, cursorName))
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read ship cursor of run %d: %w", s.run, err)
	}
	if err := json.Unmarshal(data, &c); err != nil {
		// A torn cursor only costs resending: start over.
		return shipCursor{Logs: map[int]int64{}}, nil
	}
	if c.Logs == nil {
		c.Logs = map[int]int64{}
	}
	return c, nil
}

// saveCursor writes c over the cursor file, in place: a shipper saves it
// after every acknowledgement, and a new file each time costs more than
// the write. JSON shorter than an earlier one is padded with spaces. A
// write torn by a crash leaves either an unreadable cursor (the next
// process starts over) or a mix of the old and the new, each of which the
// server acknowledged: behind, never ahead. Only the shipper calls it.
func (s *Spool) saveCursor(c shipCursor) error {
	data, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode ship cursor of run %d: %w", s.run, err)
	}
	if s.cursor == nil {
		f, err := os.OpenFile(filepath.Join(s.dir, cursorName), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("write ship cursor of run %d: %w", s.run, err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return fmt.Errorf("write ship cursor of run %d: %w", s.run, err)
		}
		s.cursor, s.cursorLen = f, int(fi.Size())
	}
	if pad := s.cursorLen - len(data); pad > 0 {
		data = append(data, bytes.Repeat([]byte(" "), pad)...)
	}
	if _, err := s.cursor.WriteAt(data, 0); err != nil {
		return fmt.Errorf("write ship cursor of run %d: %w", s.run, err)
	}
	s.cursorLen = len(data)
	return nil
}

// Remove deletes the spool once everything was delivered.
func (s *Spool) Remove() error {
	s.Close()
	if s.cursor != nil {
		s.cursor.Close()
		s.cursor = nil
	}
	if err := cleanup.RemoveAll(s.dir, nil); err != nil {
		return fmt.Errorf("remove spool of run %d: %w", s.run, err)
	}
	return nil
}
