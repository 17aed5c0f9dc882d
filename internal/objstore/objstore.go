package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// URLForms is Config.URL's forms, for a flag's help.
const URLForms = "https://HOST[:PORT]/BUCKET[/PREFIX] (http:// for a store on a private network), or s3://BUCKET[/PREFIX] for Amazon S3"

// CredentialSources is where the credentials come from, in order (the
// package doc's chain), for a flag's help.
const CredentialSources = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN); " +
	"the shared credentials file (AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, profile AWS_PROFILE); " +
	"a web identity token for a role (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN, as EKS sets them); the ECS or EC2 instance role; " +
	"never a flag or the URL"

// DefaultTimeout bounds one request that moves no body (a stat, a list
// page, a removal) when Config.Timeout is zero: 30 seconds.
const DefaultTimeout = 30 * time.Second

// Config names a bucket and where its objects go.
type Config struct {
	// URL is the store's endpoint, bucket and prefix, path-style:
	// https://HOST[:PORT]/BUCKET[/PREFIX]. http:// is accepted for a store
	// on a private network. s3://BUCKET[/PREFIX] is Amazon S3 in Region.
	URL string
	// Region is the bucket's region ("" is us-east-1, or what the
	// endpoint says).
	Region string
	// Timeout bounds each request that moves no body; 0 is
	// DefaultTimeout. Requests that move a body are bounded by their
	// context and by Timeout without progress (the transport's response
	// header timeout).
	Timeout time.Duration
	// Retries is how often a request is retried on a network error or a
	// 5xx answer (minio-go backs off exponentially); 0 is 3.
	Retries int
	// Transport replaces the HTTP transport (tests); nil is a clone of
	// http.DefaultTransport with Timeout as its header timeout.
	Transport http.RoundTripper
	// Credentials replaces the standard chain (tests).
	Credentials *credentials.Credentials
}

// Bucket is one bucket and prefix of an S3-compatible store. Its methods
// may be called concurrently. Object names given to it are relative to
// the prefix.
type Bucket struct {
	c       *minio.Client
	creds   *credentials.Credentials
	bucket  string
	prefix  string // "" or ending in "/"
	timeout time.Duration
	display string
}

// Info is what the store says of one object.
type Info struct {
	// Name is relative to the bucket's prefix.
	Name string
	// Size in bytes.
	Size int64
	// Modified is when the store wrote it (its clock, to the second).
	Modified time.Time
	// Meta is its user metadata (x-amz-meta-*), keys in lower case
	// without the prefix; only Stat and Get fill it.
	Meta map[string]string
}

// ErrNotExist is wrapped by Get's and Stat's error for a missing object;
// it is fs.ErrNotExist, so errors.Is(err, fs.ErrNotExist) holds.
var ErrNotExist = fs.ErrNotExist

// ErrExists is wrapped by PutIfAbsent's error when the name is taken.
var ErrExists = fs.ErrExist

// Open parses cfg.URL and makes a client; it makes no request (see Check).
// Errors: a URL that is not one of Config.URL's forms, or no bucket.
func Open(cfg Config) (*Bucket, error) {
	endpoint, secure, bucket, prefix, err := parseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	retries := cfg.Retries
	if retries <= 0 {
		retries = 3
	}
	tr := cfg.Transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ResponseHeaderTimeout = timeout
		t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		t.MaxIdleConnsPerHost = 16
		tr = t
	}
	creds := cfg.Credentials
	if creds == nil {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{},
			&credentials.FileAWSCredentials{},
			&credentials.IAM{},
		})
	}
	c, err := minio.New(endpoint, &minio.Options{
		Creds:        creds,
		Secure:       secure,
		Transport:    tr,
		Region:       cfg.Region,
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   retries,
	})
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", cfg.URL, err)
	}
	disp := bucket
	if prefix != "" {
		disp += "/" + strings.TrimSuffix(prefix, "/")
	}
	return &Bucket{c: c, creds: creds, bucket: bucket, prefix: prefix, timeout: timeout, display: endpoint + "/" + disp}, nil
}

// parseURL splits a Config.URL.
func parseURL(raw string) (endpoint string, secure bool, bucket, prefix string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", false, "", "", fmt.Errorf("object store URL %q: %w", raw, err)
	}
	if u.User != nil {
		return "", false, "", "", fmt.Errorf("object store URL %q: credentials do not go in the URL (use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, the credentials file, or a role)", redact(u))
	}
	path := strings.Trim(u.Path, "/")
	switch u.Scheme {
	case "s3":
		endpoint, secure = "s3.amazonaws.com", true
		path = strings.Trim(u.Host+"/"+path, "/")
	case "https", "http":
		if u.Host == "" {
			return "", false, "", "", fmt.Errorf("object store URL %q: no host", raw)
		}
		endpoint, secure = u.Host, u.Scheme == "https"
	default:
		return "", false, "", "", fmt.Errorf("object store URL %q: want https://HOST[:PORT]/BUCKET[/PREFIX] or s3://BUCKET[/PREFIX]", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", false, "", "", fmt.Errorf("object store URL %q: no query or fragment is read; give the region with its own option", raw)
	}
	bucket, prefix, _ = strings.Cut(path, "/")
	if bucket == "" {
		return "", false, "", "", fmt.Errorf("object store URL %q: no bucket (want .../BUCKET[/PREFIX])", raw)
	}
	if prefix != "" {
		prefix = strings.Trim(prefix, "/") + "/"
	}
	return endpoint, secure, bucket, prefix, nil
}

func redact(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}

// String names the store, bucket and prefix, for logs (no credential).
func (b *Bucket) String() string { return b.display }

// Check makes one request that needs the bucket and read access (a list
// of at most one object) and returns its error, for a program's start.
func (b *Bucket) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	for o := range b.c.ListObjects(ctx, b.bucket, minio.ListObjectsOptions{Prefix: b.prefix, MaxKeys: 1}) {
		if o.Err != nil {
			return b.wrap("check", "", o.Err)
		}
		break
	}
	return nil
}

// Put writes r (size bytes; -1 when unknown, which uploads in parts) as
// name with the user metadata meta, replacing an object of that name. The
// object is visible only once whole. Errors: the store's, described.
func (b *Bucket) Put(ctx context.Context, name string, r io.Reader, size int64, meta map[string]string) error {
	_, err := b.c.PutObject(ctx, b.bucket, b.prefix+name, r, size, minio.PutObjectOptions{
		UserMetadata: meta, ContentType: "application/octet-stream", SendContentMd5: false,
	})
	return b.wrap("put", name, err)
}

// MaxSinglePut is the largest object S3 takes in one PUT: 5 GiB.
const MaxSinglePut = 5 << 30

// PutIfAbsent is Put that never replaces: when name exists it writes
// nothing and its error wraps ErrExists (S3's If-None-Match: *). size must
// be known and at most MaxSinglePut: the condition holds for one PUT
// (minio-go sends it on a multipart upload's first request only, where
// two racing uploads both pass it). Errors: ErrExists, a size out of
// range, the store's.
func (b *Bucket) PutIfAbsent(ctx context.Context, name string, r io.Reader, size int64, meta map[string]string) error {
	if size < 0 || size > MaxSinglePut {
		return fmt.Errorf("object store %s: put %s: a conditional put needs a known size of at most 5 GiB, not %d", b.display, name, size)
	}
	opts := minio.PutObjectOptions{UserMetadata: meta, ContentType: "application/octet-stream", DisableMultipart: true}
	opts.SetMatchETagExcept("*")
	_, err := b.c.PutObject(ctx, b.bucket, b.prefix+name, r, size, opts)
	if err != nil {
		if r := minio.ToErrorResponse(err); r.StatusCode == http.StatusPreconditionFailed || r.Code == "PreconditionFailed" {
			return fmt.Errorf("object store %s: put %s: %w", b.display, name, ErrExists)
		}
	}
	return b.wrap("put", name, err)
}

// Get opens name for reading from offset (bytes); Info.Size is the bytes
// left from offset. The reader's errors are described like the others.
// Errors: ErrNotExist for a missing object.
func (b *Bucket) Get(ctx context.Context, name string, offset int64) (io.ReadCloser, Info, error) {
	opts := minio.GetObjectOptions{}
	if offset > 0 {
		if err := opts.SetRange(offset, 0); err != nil {
			return nil, Info{}, err
		}
	}
	o, err := b.c.GetObject(ctx, b.bucket, b.prefix+name, opts)
	if err != nil {
		return nil, Info{}, b.wrap("get", name, err)
	}
	st, err := o.Stat()
	if err != nil {
		o.Close()
		return nil, Info{}, b.wrap("get", name, err)
	}
	return &reader{o: o, b: b, name: name}, b.info(st), nil
}

type reader struct {
	o    *minio.Object
	b    *Bucket
	name string
}

func (r *reader) Read(p []byte) (int, error) {
	n, err := r.o.Read(p)
	if err != nil && err != io.EOF {
		err = r.b.wrap("get", r.name, err)
	}
	return n, err
}

func (r *reader) Close() error { return r.o.Close() }

// Stat says what the store has of name. Errors: ErrNotExist.
func (b *Bucket) Stat(ctx context.Context, name string) (Info, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	st, err := b.c.StatObject(ctx, b.bucket, b.prefix+name, minio.StatObjectOptions{})
	if err != nil {
		return Info{}, b.wrap("stat", name, err)
	}
	return b.info(st), nil
}

func (b *Bucket) info(st minio.ObjectInfo) Info {
	meta := make(map[string]string, len(st.UserMetadata))
	for k, v := range st.UserMetadata {
		meta[strings.ToLower(k)] = v
	}
	return Info{Name: strings.TrimPrefix(st.Key, b.prefix), Size: st.Size, Modified: st.LastModified, Meta: meta}
}

// List yields every object whose name starts with prefix, in the store's
// order (S3 lists by name; callers must not rely on any order). An error
// ends the sequence.
func (b *Bucket) List(ctx context.Context, prefix string) iter.Seq2[Info, error] {
	return func(yield func(Info, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		for o := range b.c.ListObjects(ctx, b.bucket, minio.ListObjectsOptions{Prefix: b.prefix + prefix, Recursive: true}) {
			if o.Err != nil {
				yield(Info{}, b.wrap("list", prefix, o.Err))
				return
			}
			if !yield(Info{Name: strings.TrimPrefix(o.Key, b.prefix), Size: o.Size, Modified: o.LastModified}, nil) {
				return
			}
		}
	}
}

// Remove removes name; a missing object is no error (S3's DELETE).
func (b *Bucket) Remove(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.wrap("remove", name, b.c.RemoveObject(ctx, b.bucket, b.prefix+name, minio.RemoveObjectOptions{}))
}

// PresignGet returns a URL that reads name without credentials until
// expiry (at most 7 days, S3's bound).
func (b *Bucket) PresignGet(ctx context.Context, name string, expiry time.Duration) (*url.URL, error) {
	u, err := b.c.PresignedGetObject(ctx, b.bucket, b.prefix+name, expiry, nil)
	return u, b.wrap("presign", name, err)
}

// Error is a failed request: Op and Name say which, Reason in one line
// what the store (or the network) said, Err is minio-go's.
type Error struct {
	Op, Name string
	Store    string
	Reason   string
	Err      error
}

func (e *Error) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("object store %s: %s: %s", e.Store, e.Op, e.Reason)
	}
	return fmt.Sprintf("object store %s: %s %s: %s", e.Store, e.Op, e.Name, e.Reason)
}

func (e *Error) Unwrap() error { return e.Err }

func (b *Bucket) wrap(op, name string, err error) error {
	if err == nil {
		return nil
	}
	var oe *Error
	if errors.As(err, &oe) {
		return err
	}
	reason, notExist := describe(err)
	if r := minio.ToErrorResponse(err); r.Code == "AccessDenied" && b.anonymous() {
		reason = "no credentials found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a credentials file, or a role): the store refused an unsigned request"
	}
	e := &Error{Op: op, Name: name, Store: b.display, Reason: reason, Err: err}
	if notExist {
		e.Err = fmt.Errorf("%w: %v", ErrNotExist, err)
	}
	return e
}

// anonymous reports whether the credentials chain found nothing: minio-go
// then sends unsigned requests, which a store refuses as AccessDenied.
func (b *Bucket) anonymous() bool {
	v, err := b.creds.GetWithContext(nil)
	return err == nil && (v.SignerType.IsAnonymous() || v.AccessKeyID == "")
}

// describe is err in one line for a user, and whether it says the object
// is missing.
func describe(err error) (string, bool) {
	if errors.Is(err, context.DeadlineExceeded) {
		return "the store did not answer in time", false
	}
	if errors.Is(err, context.Canceled) {
		return "cancelled", false
	}
	r := minio.ToErrorResponse(err)
	switch r.Code {
	case "NoSuchKey":
		return "no such object", true
	case "NoSuchBucket":
		return "the bucket does not exist", false
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken":
		return fmt.Sprintf("the store refuses the credentials (%s: %s)", r.Code, r.Message), false
	case "RequestTimeTooSkewed":
		return "the store says this machine's clock is off by more than it allows (RequestTimeTooSkewed): fix the clock (NTP)", false
	case "SlowDown", "ServiceUnavailable", "InternalError":
		return fmt.Sprintf("the store is overloaded or failing (%s, HTTP %d)", r.Code, r.StatusCode), false
	case "EntityTooLarge", "QuotaExceeded", "XMinioStorageFull", "StorageFull":
		return fmt.Sprintf("the store is full or refuses the size (%s: %s)", r.Code, r.Message), false
	}
	if r.StatusCode == http.StatusNotFound && r.Code == "" {
		return "no such object", true
	}
	if r.StatusCode >= 500 {
		return fmt.Sprintf("the store failed (HTTP %d %s)", r.StatusCode, r.Code), false
	}
	if r.Code == "" && credentialsMissing(err) {
		return "no credentials found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a credentials file, or a role)", false
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "connection refused") {
		return fmt.Sprintf("the store is unreachable (%v)", err), false
	}
	if r.Code != "" {
		return fmt.Sprintf("%s: %s (HTTP %d)", r.Code, r.Message, r.StatusCode), false
	}
	return err.Error(), false
}

func credentialsMissing(err error) bool {
	s := err.Error()
	return strings.Contains(s, "credentials") && (strings.Contains(s, "no valid") || strings.Contains(s, "empty") || strings.Contains(s, "not found"))
}
