package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"

	"knotless.dev/knotless/internal/objstore"
	"knotless.dev/knotless/internal/objstore/s3test"
)

func TestOpen_URLForms(t *testing.T) {
	for _, c := range []struct{ url, want, err string }{
		{url: "https://s3.example.com/b", want: "s3.example.com/b"},
		{url: "http://127.0.0.1:9000/b/some/prefix/", want: "127.0.0.1:9000/b/some/prefix"},
		{url: "s3://b/p", want: "s3.amazonaws.com/b/p"},
		{url: "https://s3.example.com/", err: "no bucket"},
		{url: "ftp://x/b", err: "want https://"},
		{url: "https://AKIA:secret@s3.example.com/b", err: "credentials do not go in the URL"},
		{url: "https://s3.example.com/b?region=x", err: "no query"},
	} {
		b, err := objstore.Open(objstore.Config{URL: c.url})
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Open(%q) = %v, want an error with %q", c.url, err, c.err)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("Open(%q)'s error shows the secret: %v", c.url, err)
			}
			continue
		}
		if err != nil || b.String() != c.want {
			t.Errorf("Open(%q) = %v, %v; want %q", c.url, b, err, c.want)
		}
	}
}

func TestBucket_PutGetListRemoveAgainstARealStore(t *testing.T) {
	s := s3test.Start(t)
	b := s.Open(t, "pre")
	ctx := context.Background()
	if err := b.Check(ctx); err != nil {
		t.Fatal(err)
	}
	// Written in an order that is not the names' order: List must not be
	// read as the write order.
	for _, n := range []string{"c/2", "a/1", "b/3"} {
		if err := b.Put(ctx, n, strings.NewReader("data "+n), -1, map[string]string{"sha256": "x" + n}); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	for o, err := range b.List(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, o.Name)
	}
	if strings.Join(names, " ") != "a/1 b/3 c/2" {
		t.Errorf("List = %v", names)
	}
	r, info, err := b.Get(ctx, "c/2", 2)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if string(got) != "ta c/2" || info.Size != 6 || info.Meta["sha256"] != "xc/2" {
		t.Errorf("Get from 2 = %q, %+v", got, info)
	}
	if err := b.PutIfAbsent(ctx, "a/1", strings.NewReader("other"), 5, nil); !errors.Is(err, objstore.ErrExists) {
		t.Errorf("PutIfAbsent over an object = %v, want ErrExists", err)
	}
	if err := b.PutIfAbsent(ctx, "a/new", strings.NewReader("new"), 3, nil); err != nil {
		t.Errorf("PutIfAbsent of a new name = %v", err)
	}
	if err := b.Remove(ctx, "a/1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(ctx, "a/1"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat after Remove = %v, want fs.ErrNotExist", err)
	}
	if _, _, err := b.Get(ctx, "a/1", 0); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Get after Remove = %v, want fs.ErrNotExist", err)
	}
	if err := b.Remove(ctx, "a/1"); err != nil {
		t.Errorf("Remove of a missing object = %v, want nil", err)
	}
}

// Each fault is described in one line that names what went wrong.
func TestBucket_FaultsAreDescribedInOneLine(t *testing.T) {
	s := s3test.Start(t)
	ctx := context.Background()
	check := func(name string, cfg objstore.Config, want string) {
		t.Helper()
		b, err := objstore.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = b.Put(ctx, "x", bytes.NewReader([]byte("x")), 1, nil)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: Put = %v, want one line with %q", name, err, want)
		}
	}
	wrong := s.Config("")
	wrong.Credentials = credentials.NewStaticV4(s.AccessKey, "wrong", "")
	check("wrong secret", wrong, "refuses the credentials")

	missing := s.Config("")
	missing.URL = s.URL + "/no-such-bucket"
	check("missing bucket", missing, "bucket does not exist")

	p := s3test.NewProxy(t, s)
	storm := s.Config("")
	storm.URL = p.BucketURL(s, "")
	storm.Retries = 2
	p.Fail(-1, 503, "SlowDown")
	check("503 storm", storm, "overloaded or failing")
	p.Fail(-1, 403, "RequestTimeTooSkewed")
	check("clock off", storm, "clock is off")
	p.Heal()

	down := s.Config("")
	down.Retries = 1
	s.Kill()
	check("store down", down, "unreachable")
	s.Restart(t)

	slow := s.Config("")
	slow.URL = p.BucketURL(s, "")
	slow.Timeout = 200 * time.Millisecond
	slow.Retries = 1
	p.Stall(2 * time.Second)
	b, _ := objstore.Open(slow)
	if _, err := b.Stat(ctx, "x"); err == nil || !strings.Contains(err.Error(), "did not answer in time") {
		t.Errorf("stalled store: Stat = %v, want 'did not answer in time'", err)
	}
	p.Heal()
}

// A storm shorter than the retries is ridden out: the write lands once.
func TestBucket_RidesOutAShort503Storm(t *testing.T) {
	s := s3test.Start(t)
	p := s3test.NewProxy(t, s)
	cfg := s.Config("")
	cfg.URL = p.BucketURL(s, "")
	b, err := objstore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Fail(2, 503, "SlowDown")
	if err := b.Put(context.Background(), "x", strings.NewReader("hello"), 5, nil); err != nil {
		t.Fatalf("Put through a 2-answer storm with 3 retries = %v", err)
	}
	if p.Failed() != 2 {
		t.Errorf("the proxy failed %d requests, want 2 (the storm did not happen)", p.Failed())
	}
}

// Two writers racing with PutIfAbsent for one name leave one object and
// one ErrExists, also for objects past minio-go's 16 MiB multipart
// threshold (a multipart upload carried the condition on its first
// request only, and both 40 MB uploads succeeded).
func TestBucket_PutIfAbsentLetsOneOfTwoRacingLargeWritersWin(t *testing.T) {
	s := s3test.Start(t)
	b := s.Open(t, "")
	const size = 40 << 20
	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			data := bytes.Repeat([]byte{byte('a' + i)}, size)
			errs <- b.PutIfAbsent(context.Background(), "race", bytes.NewReader(data), size, nil)
		}()
	}
	var won, lost int
	for range 2 {
		switch err := <-errs; {
		case err == nil:
			won++
		case errors.Is(err, objstore.ErrExists):
			lost++
		default:
			t.Fatal(err)
		}
	}
	if won != 1 || lost != 1 {
		t.Errorf("%d writers won and %d were told the name exists; want 1 and 1", won, lost)
	}
	if err := b.PutIfAbsent(context.Background(), "unknown", strings.NewReader("x"), -1, nil); err == nil {
		t.Error("PutIfAbsent of an unknown size succeeded; want an error (the condition would not hold)")
	}
}

// A program with no credentials at all (no variables, no file, no role)
// is told so, not that the store refuses its credentials: minio-go's
// chain falls back to unsigned requests, which the store answers
// AccessDenied (the fresh reader saw "the store refuses the credentials
// (AccessDenied: Access Denied.)").
func TestBucket_NoCredentialsAtAllSaysSo(t *testing.T) {
	s := s3test.Start(t)
	home := t.TempDir()
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_WEB_IDENTITY_TOKEN_FILE",
		"AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_PROFILE"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", home+"/none")
	t.Setenv("HOME", home)
	// The instance endpoints (IMDS) are not reachable here; minio-go
	// tries them last and finds nothing.
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	b, err := objstore.Open(objstore.Config{URL: s.BucketURL(s.URL, ""), Timeout: 5 * time.Second, Retries: 1})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Put(context.Background(), "x", strings.NewReader("x"), 1, nil)
	if err == nil || !strings.Contains(err.Error(), "no credentials found") {
		t.Errorf("Put without credentials = %v, want 'no credentials found'", err)
	}
}
