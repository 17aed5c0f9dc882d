package runner

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"sync"
	"time"
)

// digestWait bounds how long a session start waits for selfDigest (Run
// starts it first; a stripped knotless-run of 64 MB takes 65-140 ms here):
// the Runners page then lacks the digest rather than the runner its
// session.
const digestWait = 2 * time.Second

// digestWithin is selfDigest, or "" when it takes longer than d.
func digestWithin(d time.Duration) string {
	done := make(chan string, 1)
	go func() { done <- selfDigest() }()
	select {
	case s := <-done:
		return s
	case <-time.After(d):
		return ""
	}
}

// selfDigest is the SHA-256 (lower-case hex) of this process's executable,
// as sha256sum prints it: the build itself, whatever its version says (a
// deployment's manifest pins it, e.g. KNOTLESS_RUN_SHA256_AMD64). "" when it
// cannot be read. Computed once.
var selfDigest = sync.OnceValue(func() string {
	p, err := os.Executable()
	if err != nil {
		return ""
	}
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
})
