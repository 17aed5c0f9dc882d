package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

const (
	// EnvRequired, when "1", turns "no engine" from a skip into a failure.
	EnvRequired = "KNOTLESS_TEST_DOCKER_REQUIRED"
	// Socket is the engine scripts/dockerd.sh starts; used when
	// DOCKER_HOST is not set.
	Socket = "/run/knotless-dockerd/docker.sock"
	// OwnPathImage is JobImage laid out as images such as golang's are:
	// `go` and `hello` only in directories its own ENV PATH names, as the
	// cluster's job-ownpath image (EnsureJobImage).
	OwnPathImage = "localhost/knotless/job-ownpath:1"
	// JobImage is the busybox job image (user 1000:1000), made by
	// EnsureJobImage.
	JobImage = "localhost/knotless/job-base:1"
	// RootImage is the same image whose USER is root, for tests of
	// --run-as image.
	RootImage = "localhost/knotless/job-root:1"
)

// Engine is a reachable Docker engine.
type Engine struct {
	Client *client.Client
	// Host is the engine's address (unix://...).
	Host string
}

// Connect returns the engine DOCKER_HOST names (else Socket's, when it
// exists), with the API version negotiated, after a ping of at most 5 s;
// it skips the test when none answers ("no Docker engine: run
// scripts/dockerd.sh up"), or fails it with KNOTLESS_TEST_DOCKER_REQUIRED=1.
// It sets DOCKER_HOST for the process when it is not set, so that code
// and programs under test making their own client find the same engine.
func Connect(t testing.TB) *Engine {
	t.Helper()
	required := os.Getenv(EnvRequired) == "1"
	e, err := Load(context.Background())
	if err != nil {
		msg := fmt.Sprintf("no Docker engine: run scripts/dockerd.sh up, or set DOCKER_HOST (%v)", err)
		if required {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if os.Getenv("DOCKER_HOST") == "" {
		// Every test of the process uses this one engine: programs the
		// test starts (knotless-run) find it the same way.
		os.Setenv("DOCKER_HOST", e.Host)
	}
	return e
}

// Load is Connect without a testing.TB.
func Load(ctx context.Context) (*Engine, error) {
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		if _, err := os.Stat(Socket); err == nil {
			host = "unix://" + Socket
		}
	}
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	c, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.Ping(pctx); err != nil {
		c.Close()
		return nil, err
	}
	return &Engine{Client: c, Host: c.DaemonHost()}, nil
}

var (
	imageMu   sync.Mutex
	imageDone = map[string]bool{}
)

// EnsureJobImage imports JobImage and RootImage into the engine unless it
// has them: one layer from /bin/busybox (Debian's busybox-static) with a
// symbolic link per applet, /tmp 1777, /etc/passwd with root, job (1000)
// and nobody, as the cluster's job-base image.
func (e *Engine) EnsureJobImage(t testing.TB) string {
	t.Helper()
	imageMu.Lock()
	defer imageMu.Unlock()
	for ref, user := range map[string]string{JobImage: "1000:1000", RootImage: "0:0", OwnPathImage: "1000:1000"} {
		if imageDone[ref] {
			continue
		}
		path, extra := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", map[string][]byte(nil)
		if ref == OwnPathImage {
			path, extra = ownPath, ownPathFiles
		}
		if err := e.importBusybox(context.Background(), ref, user, path, extra); err != nil {
			t.Fatalf("job image %s: %v", ref, err)
		}
		imageDone[ref] = true
	}
	return JobImage
}

func (e *Engine) importBusybox(ctx context.Context, ref, user, path string, extra map[string][]byte) error {
	if _, err := e.Client.ImageInspect(ctx, ref); err == nil {
		return nil
	}
	layer, err := busyboxLayer(extra)
	if err != nil {
		return err
	}
	rc, err := e.Client.ImageImport(ctx, image.ImportSource{Source: bytes.NewReader(layer), SourceName: "-"}, ref, image.ImportOptions{
		Changes: []string{
			"USER " + user,
			"ENV PATH=" + path,
			"ENV HOME=/home/job",
			"WORKDIR /home/job",
			`CMD ["/bin/sh"]`,
		},
	})
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	defer rc.Close()
	out, _ := io.ReadAll(rc)
	if bytes.Contains(out, []byte(`"error"`)) {
		return fmt.Errorf("import: %s", out)
	}
	return nil
}

// busyboxLayer is the rootfs tar (uncompressed, fixed times), with the
// executable files extra (path → content) added.
func busyboxLayer(extra map[string][]byte) ([]byte, error) {
	const bb = "/bin/busybox"
	out, err := exec.Command(bb, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("list busybox applets (is busybox-static installed?): %w", err)
	}
	type file struct {
		mode     fs.FileMode
		uid, gid int
		data     []byte
		link     string
	}
	passwd := "root:x:0:0:root:/root:/bin/sh\njob:x:1000:1000:job:/home/job:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
	group := "root:x:0:\njob:x:1000:\nnogroup:x:65534:\n"
	bin, err := os.ReadFile(bb)
	if err != nil {
		return nil, err
	}
	files := map[string]file{
		bb:            {mode: 0o755, data: bin},
		"/tmp":        {mode: fs.ModeDir | fs.ModeSticky | 0o777},
		"/root":       {mode: fs.ModeDir | 0o700},
		"/home/job":   {mode: fs.ModeDir | 0o755, uid: 1000, gid: 1000},
		"/etc/passwd": {mode: 0o644, data: []byte(passwd)},
		"/etc/group":  {mode: 0o644, data: []byte(group)},
	}
	for _, applet := range strings.Fields(string(out)) {
		p := "/" + strings.TrimPrefix(applet, "/")
		if p != bb {
			files[p] = file{mode: fs.ModeSymlink | 0o777, link: bb}
		}
	}
	for p, data := range extra {
		files[p] = file{mode: 0o755, data: data}
	}
	for p := range files {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := files[d]; !ok {
				files[d] = file{mode: fs.ModeDir | 0o755}
			}
		}
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	for _, n := range names {
		f := files[n]
		h := &tar.Header{Name: strings.TrimPrefix(n, "/"), Mode: int64(f.mode.Perm()), Uid: f.uid, Gid: f.gid, ModTime: epoch, Format: tar.FormatPAX}
		if f.mode&fs.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		switch {
		case f.mode&fs.ModeDir != 0:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case f.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Containers lists the containers (running or not) that carry every
// label of labels (KEY=VALUE).
func (e *Engine) Containers(ctx context.Context, labels ...string) ([]container.Summary, error) {
	f := filters.NewArgs()
	for _, l := range labels {
		f.Add("label", l)
	}
	return e.Client.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
}

// RemoveLabelled removes (by force) every container with all of labels;
// for a test's cleanup.
func (e *Engine) RemoveLabelled(ctx context.Context, labels ...string) {
	list, _ := e.Containers(ctx, labels...)
	for _, c := range list {
		_ = e.Client.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	}
}

// ownPath and ownPathFiles are OwnPathImage's PATH and the tools only it
// names (the same as test/cluster's OwnPathEnv and OwnPathFiles).
const ownPath = "/usr/local/go/bin:/opt/t/bin:/usr/bin:/bin"

var ownPathFiles = map[string][]byte{
	"/usr/local/go/bin/go": []byte("#!/bin/sh\necho \"go (the image's own, on its PATH): $*\"\n"),
	"/opt/t/bin/hello":     []byte("#!/bin/sh\necho \"hello from the image's own PATH\"\n"),
}
