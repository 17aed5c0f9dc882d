package server

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/testwait"
)

// helperLogDir, when set, makes TestHelperAppendSameLog append to the
// logs under it (a process of TestLogFiles_TwoProcessesAppendingOneLog...).
const helperLogDir = "KNOTLESS_LOG_HELPER_DIR"

// processLog is the log both helper processes send: lines of 16 bytes,
// each with its time, in chunks of a few lines that overlap the chunk
// before (as a runner's retry resends what it is not sure arrived).
func processLog() (data []byte, times []api.LineTime, chunks [][2]int) {
	const lines = 3000
	for i := range lines {
		times = append(times, api.LineTime{Offset: int64(len(data)), UnixMS: 1_700_000_000_000 + int64(i)})
		data = fmt.Appendf(data, "line %010d\n", i)
	}
	for from := 0; from < len(data); {
		to := min(len(data), from+16*(1+from/16%7))
		chunks = append(chunks, [2]int{max(0, from-16*(from/16%3)), to})
		from = to
	}
	return data, times, chunks
}

// TestLogFiles_TwoProcessesAppendingOneLogWriteEachByteAndLineTimeOnce is
// TestLogFiles_InterleavedAppendsToOneLogWriteEachByteOnce across
// processes: two server replicas share the data directory, and a runner's
// retry that a proxy sends to the other replica appends to the log of the
// same step while the first request still writes. Two processes (this
// test's binary, TestHelperAppendSameLog) append the same log at once,
// each chunk at its offset with its line times, many times over: the log
// holds each byte once, and its times file each line's time once, in
// order (the in-process lock serializes only one replica's appends).
func TestLogFiles_TwoProcessesAppendingOneLogWriteEachByteAndLineTimeOnce(t *testing.T) {
	dir := t.TempDir()
	start := filepath.Join(dir, "start")
	const runs = 20 // logs, one per run: more chances for the two to meet
	var wg sync.WaitGroup
	outs := make([]bytes.Buffer, 2)
	errs := make([]error, 2)
	for i := range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAppendSameLog$", "-test.count=1")
		cmd.Env = append(os.Environ(), helperLogDir+"="+dir, "KNOTLESS_LOG_HELPER_RUNS="+strconv.Itoa(runs))
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = cmd.Wait()
		}()
	}
	// Both wait for the start file, so that their appends meet.
	testwait.Until(t, 30*time.Second, "both helpers ready", func() (bool, string) {
		m, _ := filepath.Glob(filepath.Join(dir, "ready-*"))
		return len(m) == 2, fmt.Sprint(m)
	})
	if err := os.WriteFile(start, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil {
			t.Fatalf("helper %d: %v\n%s", i, errs[i], outs[i].String())
		}
	}

	data, times, _ := processLog()
	l := &logFiles{dir: dir}
	for run := int64(1); run <= runs; run++ {
		got, err := os.ReadFile(l.path(run, 1))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("run %d: the log holds %d bytes (%v), want the %d sent, each once", run, len(got), err, len(data))
		}
		raw, err := os.ReadFile(l.timesPath(run, 1))
		if err != nil {
			t.Fatal(err)
		}
		var kept []api.LineTime
		for ; len(raw) >= api.LineTimeSize; raw = raw[api.LineTimeSize:] {
			kept = append(kept, api.LineTime{Offset: int64(binary.LittleEndian.Uint64(raw)), UnixMS: int64(binary.LittleEndian.Uint64(raw[8:]))})
		}
		if !slices.Equal(kept, times) {
			dup := 0
			for i := 1; i < len(kept); i++ {
				if kept[i].Offset <= kept[i-1].Offset {
					dup++
				}
			}
			t.Fatalf("run %d: the times file holds %d line times (%d not after the one before), want each of the %d lines' once, in order", run, len(kept), dup, len(times))
		}
	}
}

// TestHelperAppendSameLog is a process of
// TestLogFiles_TwoProcessesAppendingOneLogWriteEachByteAndLineTimeOnce.
func TestHelperAppendSameLog(t *testing.T) {
	dir := os.Getenv(helperLogDir)
	if dir == "" {
		t.Skip("helper process of TestLogFiles_TwoProcessesAppendingOneLogWriteEachByteAndLineTimeOnce")
	}
	runs, _ := strconv.Atoi(os.Getenv("KNOTLESS_LOG_HELPER_RUNS"))
	data, times, chunks := processLog()
	l := &logFiles{dir: dir}
	if err := os.WriteFile(filepath.Join(dir, "ready-"+strconv.Itoa(os.Getpid())), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "start")); err == nil {
			break
		}
		time.Sleep(time.Millisecond) // polling for the other process to be ready, bounded by the parent's wait
	}
	for run := int64(1); run <= int64(runs); run++ {
		for _, c := range chunks {
			var ct []api.LineTime
			for _, lt := range times {
				if lt.Offset >= int64(c[0]) && lt.Offset < int64(c[1]) {
					ct = append(ct, lt)
				}
			}
			if _, _, err := l.append(run, 1, int64(c[0]), data[c[0]:c[1]], ct...); err != nil {
				t.Fatalf("append [%d, %d) to run %d: %v", c[0], c[1], run, err)
			}
		}
	}
}
