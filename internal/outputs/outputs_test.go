package outputs

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestRoots_CleansSortsAndDropsPathsBelowOthers(t *testing.T) {
	got, err := Roots([]string{"dist/", "coverage.out", "dist/app/x", "./dist", "b/../c", "coverage.out"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"c", "coverage.out", "dist"}; !slices.Equal(got, want) {
		t.Errorf("Roots = %q, want %q", got, want)
	}
	if got, _ := Roots([]string{"a", "."}); !slices.Equal(got, []string{"."}) {
		t.Errorf("Roots with the checkout itself = %q, want [.]", got)
	}
	for _, bad := range []string{"/etc", "../x", "a/../../x"} {
		if _, err := Roots([]string{bad}); err == nil {
			t.Errorf("Roots(%q): no error", bad)
		}
	}
}

func write(t *testing.T, p, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}

// The same tree packs to the same bytes, parents before children in byte
// order, and unpacks to the same files, links and modes.
func TestPack_IsDeterministicAndUnpacksToTheSameTree(t *testing.T) {
	src := t.TempDir()
	write(t, filepath.Join(src, "dist", "b.txt"), "b", 0o644)
	write(t, filepath.Join(src, "dist", "a", "run.sh"), "#!/bin/sh\n", 0o755)
	write(t, filepath.Join(src, "cov.out"), "\x00\x01\xff", 0o600)
	if err := os.Symlink("a/run.sh", filepath.Join(src, "dist", "link")); err != nil {
		t.Fatal(err)
	}
	roots, _ := Roots([]string{"dist/", "cov.out"})
	var one, two bytes.Buffer
	total, per, err := Pack(context.Background(), &one, src, roots)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Pack(context.Background(), &two, src, roots); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(one.Bytes(), two.Bytes()) {
		t.Error("the same tree packed twice gives different archives")
	}
	if total.Entries != 6 || total.Bytes != 14 || per["dist"].Entries != 5 || per["cov.out"].Bytes != 3 {
		t.Errorf("stats %+v per root %+v", total, per)
	}
	entries, st, err := Scan(bytes.NewReader(one.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Path)
	}
	if want := []string{"cov.out", "dist", "dist/a", "dist/a/run.sh", "dist/b.txt", "dist/link"}; !slices.Equal(names, want) || st != total {
		t.Errorf("Scan: %q %+v, want %q %+v", names, st, want, total)
	}
	dst := t.TempDir()
	if _, err := Unpack(context.Background(), bytes.NewReader(one.Bytes()), dst); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "cov.out")); string(b) != "\x00\x01\xff" {
		t.Errorf("cov.out = %q", b)
	}
	if target, _ := os.Readlink(filepath.Join(dst, "dist", "link")); target != "a/run.sh" {
		t.Errorf("link target %q", target)
	}
	if fi, err := os.Stat(filepath.Join(dst, "dist", "a", "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("run.sh: %v %v, want mode 0755", fi, err)
	}
	// A second unpack into the same directory overwrites nothing.
	if _, err := Unpack(context.Background(), bytes.NewReader(one.Bytes()), dst); err == nil || !strings.Contains(err.Error(), "not overwritten") {
		t.Errorf("unpacking over existing files: %v, want a refusal", err)
	}
}

func archive(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		if h.Typeflag == tar.TypeReg {
			h.Size = 1
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte("x"))
		}
	}
	tw.Close()
	return buf.Bytes()
}

// Nothing an archive says may write outside the directory: not a name
// with "..", not an absolute one, not through a symbolic link it made,
// not a link pointing out.
func TestUnpack_RefusesEverythingThatLeavesTheDirectory(t *testing.T) {
	outside := t.TempDir()
	for name, a := range map[string][]byte{
		"dot-dot":            archive(t, &tar.Header{Name: "../x", Typeflag: tar.TypeReg, Mode: 0o644}),
		"absolute":           archive(t, &tar.Header{Name: filepath.Join(outside, "x"), Typeflag: tar.TypeReg, Mode: 0o644}),
		"link out":           archive(t, &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../../x"}),
		"absolute link":      archive(t, &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside}),
		"write through link": archive(t, &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "."}, &tar.Header{Name: "l/../../x", Typeflag: tar.TypeReg}),
		"hard link":          archive(t, &tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}),
	} {
		dst := filepath.Join(t.TempDir(), "d")
		if err := os.Mkdir(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := Unpack(context.Background(), bytes.NewReader(a), dst); err == nil {
			t.Errorf("%s: unpacked without error", name)
		}
		if ents, _ := os.ReadDir(outside); len(ents) > 0 {
			t.Fatalf("%s: wrote outside the directory: %v", name, ents)
		}
		if _, err := os.Lstat(filepath.Join(filepath.Dir(dst), "x")); err == nil {
			t.Fatalf("%s: wrote beside the directory", name)
		}
	}
}
