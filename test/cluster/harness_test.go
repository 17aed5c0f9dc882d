package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"io/fs"
	"strings"
	"testing"
)

func TestLayer_AddsParentsKeepsModesAndLinks(t *testing.T) {
	b, err := layer([]File{
		{Path: "/usr/bin/nc", Mode: fs.ModeSymlink | 0o777, Link: "/bin/busybox"},
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0::/root:/bin/sh\n")},
		{Path: "/home/job", Mode: fs.ModeDir | 0o755, UID: 1000, GID: 1000},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*tar.Header{}
	var order []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h
		order = append(order, h.Name)
	}
	for _, want := range []string{"usr/", "usr/bin/", "usr/bin/nc", "tmp/", "etc/", "etc/passwd", "home/", "home/job/"} {
		if got[want] == nil {
			t.Errorf("layer lacks %q; has %v", want, order)
		}
	}
	if h := got["tmp/"]; h != nil && h.Mode != 0o1777 {
		t.Errorf("/tmp mode = %o, want 1777", h.Mode)
	}
	if h := got["usr/bin/nc"]; h != nil && (h.Typeflag != tar.TypeSymlink || h.Linkname != "/bin/busybox") {
		t.Errorf("nc = type %c -> %q, want a symlink to /bin/busybox", h.Typeflag, h.Linkname)
	}
	if h := got["home/job/"]; h != nil && h.Uid != 1000 {
		t.Errorf("/home/job uid = %d, want 1000", h.Uid)
	}
	if strings.Join(order, " ") != strings.Join(sortedCopy(order), " ") {
		t.Errorf("entries not in path order (parents first): %v", order)
	}
}

func sortedCopy(s []string) []string {
	c := append([]string(nil), s...)
	for i := range c {
		for j := i + 1; j < len(c); j++ {
			if strings.TrimSuffix(c[j], "/") < strings.TrimSuffix(c[i], "/") {
				c[i], c[j] = c[j], c[i]
			}
		}
	}
	return c
}

func TestImportImage_RefusesLatestAndUntagged(t *testing.T) {
	c := Config{StateDir: t.TempDir()}
	for _, ref := range []string{"localhost/x:latest", "localhost/x"} {
		err := c.ImportImage(context.Background(), Image{Ref: ref})
		if err == nil || !strings.Contains(err.Error(), "latest") {
			t.Errorf("ImportImage(%q) = %v, want a refusal naming latest", ref, err)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/var/lib/a\040b`); got != "/var/lib/a b" {
		t.Errorf("got %q", got)
	}
}

func TestSplitRule_KeepsQuotedComments(t *testing.T) {
	got := splitRule(`-A INPUT -m comment --comment "kubernetes firewall for dropping marked packets" -j KUBE-FIREWALL`)
	want := []string{"-A", "INPUT", "-m", "comment", "--comment", "kubernetes firewall for dropping marked packets", "-j", "KUBE-FIREWALL"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("splitRule = %q, want %q", got, want)
	}
	if !jumpsToKube(got) {
		t.Error("jumpsToKube = false, want true")
	}
}

func TestNodeName_IsAValidSubdomain(t *testing.T) {
	for host, want := range map[string]string{"vm": "vm", "My_Laptop": "my-laptop", "-x.": "x", "__": "node"} {
		if got := nodeName(host); got != want {
			t.Errorf("nodeName(%q) = %q, want %q", host, got, want)
		}
	}
}

// containerd serves its gRPC and ttrpc sockets in the state directory and
// nowhere else, runs pods with the runc Build built, and reads no config
// but ours. Found by trying it: containerd 2's config version 4 ignores a
// top-level [grpc] address, and the cluster's containerd came up on
// /run/containerd/containerd.sock, the host's (Docker's containerd).
func TestContainerdConfig_ServesOnlyInTheStateDirWithItsOwnRunc(t *testing.T) {
	c := Config{StateDir: "/state"}
	cfg := c.containerdConfig()
	for _, want := range []string{
		"version = 4",
		"imports = []",
		"[plugins.'io.containerd.server.v1.grpc']\n  address = \"/state/run/containerd.sock\"",
		"[plugins.'io.containerd.server.v1.ttrpc']\n  address = \"/state/run/containerd.sock.ttrpc\"",
		`BinaryName = "/state/bin/runc"`,
		`sandbox = "` + PauseImage + `"`,
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("containerd config lacks %s:\n%s", want, cfg)
		}
	}
	for _, line := range strings.Split(cfg, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "[") && !strings.HasPrefix(strings.TrimSpace(line), "[plugins.") {
			t.Errorf("containerd config has a top-level section %s, which version 4 ignores or moves", line)
		}
	}
}

// The API server starts with --authentication-config naming the file Up
// writes, which trusts no JWT issuer until a test adds one.
func TestProcesses_APIServerReadsTheAuthenticationConfigWithNoIssuer(t *testing.T) {
	c := Config{StateDir: "/state"}
	var args []string
	for _, p := range c.processes() {
		if p.name == "kube-apiserver" {
			args = p.args
		}
	}
	want := "--authentication-config=/state/" + AuthenticationConfigFile
	found := false
	for _, a := range args {
		found = found || a == want
	}
	if !found {
		t.Errorf("kube-apiserver args %v lack %s", args, want)
	}
	if !strings.Contains(emptyAuthenticationConfig, "kind: AuthenticationConfiguration") || !strings.Contains(emptyAuthenticationConfig, "jwt: []") {
		t.Errorf("initial configuration:\n%s", emptyAuthenticationConfig)
	}
}
