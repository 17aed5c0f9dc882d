package agent_test

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/agent"
)

// A copy stream never writes outside its destination through a symbolic
// link, whether the stream made the link (`./l -> OUTSIDE`, then
// `./l/x`) or found it below the destination. The failure it pins: a
// crafted stream (a cache object in a shared bucket, a job's answer to
// CopyOut) made ExtractTar on the runner's host write OUTSIDE/x.
func TestExtractTar_NeverWritesThroughALinkBelowTheDestination(t *testing.T) {
	outside := t.TempDir()
	for name, entries := range map[string][]tar.Header{
		"a link the stream made": {
			{Name: ".", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "./l", Typeflag: tar.TypeSymlink, Linkname: outside},
			{Name: "./l/x", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1},
		},
		"a link deeper down": {
			{Name: ".", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "./d", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "./d/l", Typeflag: tar.TypeSymlink, Linkname: outside},
			{Name: "./d/l/sub/x", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1},
		},
		"a directory through the link": {
			{Name: ".", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "./l", Typeflag: tar.TypeSymlink, Linkname: outside},
			{Name: "./l/dir", Typeflag: tar.TypeDir, Mode: 0o755},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, h := range entries {
				if err := tw.WriteHeader(&h); err != nil {
					t.Fatal(err)
				}
				if h.Size > 0 {
					tw.Write([]byte("x"))
				}
			}
			tw.Close()
			dst := filepath.Join(t.TempDir(), "dst")
			_, err := agent.ExtractTar(context.Background(), &buf, agent.HostTree{}, dst)
			if err == nil || !strings.Contains(err.Error(), "not a directory") {
				t.Errorf("ExtractTar = %v, want a refusal", err)
			}
			left, _ := os.ReadDir(outside)
			if len(left) != 0 {
				t.Errorf("the stream wrote outside its destination: %v", left)
			}
		})
	}
	// A link found below the destination (made before the copy) is
	// refused too.
	dst := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dst, "found")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: ".", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "./found/x", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	tw.Write([]byte("x"))
	tw.Close()
	if _, err := agent.ExtractTar(context.Background(), &buf, agent.HostTree{}, dst); err == nil {
		t.Error("a stream wrote below a link found in the destination")
	}
	if left, _ := os.ReadDir(outside); len(left) != 0 {
		t.Errorf("the stream wrote outside its destination: %v", left)
	}
}
