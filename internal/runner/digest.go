package runner

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"sync"
)

// selfDigest is the SHA-256 (lower-case hex) of this process's executable,
// as sha256sum prints it: the build itself, whatever its version says (a
// deployment's manifest pins it, e.g. KNOTLESS_RUN_SHA256). "" when it
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
