package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bluesky-social/indigo/atproto/atcrypto"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/svcauth"
	"knotless.dev/knotless/internal/version"
)

// State is what `knotless-run login` writes and `knotless-run run` reads: the
// runner's identity and where it belongs. The file is JSON, mode 0600, and
// holds the runner's private key: it must never enter a job environment.
type State struct {
	Server     string   `json:"server"`     // server URL, e.g. "https://ci.example.com"
	ServerDID  string   `json:"serverDid"`  // audience of the runner's JWTs
	Repo       string   `json:"repo"`       // OWNER/NAME the runner serves
	Name       string   `json:"name"`       // runner name, unique per repository
	Labels     []string `json:"labels"`     // labels the runner advertises
	DID        string   `json:"did"`        // runner DID (did:key of Key)
	PrivateKey string   `json:"privateKey"` // P-256 private key, multibase

	key atcrypto.PrivateKey
}

// LoadState reads and checks a state file. It refuses a file other users
// can read, because it holds the runner's private key.
func LoadState(path string) (*State, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read runner state: %w (run `knotless-run login` first)", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("runner state %s has mode %v: it holds a private key, run `chmod 600 %s`", path, fi.Mode().Perm(), path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read runner state: %w", err)
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("parse runner state %s: %w", path, err)
	}
	if s.Server == "" || s.ServerDID == "" || s.Repo == "" || s.Name == "" || s.DID == "" || s.PrivateKey == "" {
		return nil, fmt.Errorf("runner state %s is incomplete: run `knotless-run login` again", path)
	}
	k, err := svcauth.ParseKey(s.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("runner state %s: %w", path, err)
	}
	did, err := svcauth.DIDKey(k)
	if err != nil {
		return nil, fmt.Errorf("runner state %s: %w", path, err)
	}
	if did != s.DID {
		return nil, fmt.Errorf("runner state %s: the key does not match did %s", path, s.DID)
	}
	s.key = k
	return &s, nil
}

// Client returns an XRPC client for the state's server whose requests carry
// a fresh service-auth JWT signed by the runner's key. httpc may be nil.
func (s *State) Client(httpc *http.Client) *api.Client {
	signer := &svcauth.Signer{DID: s.DID, Audience: s.ServerDID, Key: s.key}
	return &api.Client{
		BaseURL:   s.Server,
		HTTP:      httpc,
		Auth:      signer.AuthFunc(),
		UserAgent: "knotless-run/" + version.Version,
	}
}

// ApproveCommand is what an owner of the repository runs to approve the
// runner, e.g. "knotless runner approve builder-1 --repo alice/app --did
// did:key:z...". The DID makes the server refuse to approve a registration
// made by anyone else under the same name.
func (s *State) ApproveCommand() string {
	return fmt.Sprintf("knotless runner approve %s --repo %s --did %s", s.Name, s.Repo, s.DID)
}

// LoginCommand is the command that registers this runner anew (a new
// identity) after it was removed on the server, for the state file at path.
func (s *State) LoginCommand(path string) string {
	cmd := fmt.Sprintf("knotless-run login --force --server %s --repo %s --name %s", s.Server, s.Repo, s.Name)
	if len(s.Labels) > 0 {
		cmd += " --labels " + strings.Join(s.Labels, ",")
	}
	if path == "" {
		path = "FILE"
	}
	return cmd + " --state " + path
}

// LoginOptions are the inputs of Login.
type LoginOptions struct {
	Server string   // server URL
	Repo   string   // OWNER/NAME
	Name   string   // runner name
	Labels []string // labels the runner advertises
	State  string   // path of the state file to write
	Force  bool     // overwrite an existing state file
	// Token is the registration token an owner made (knotless runner
	// token), or an API token of an account that may manage Repo.
	Token string
	HTTP  *http.Client
}

// Login registers a new runner identity with the server and writes its state
// file (mode 0600). It makes a fresh P-256 key (the DID is its did:key),
// asks the server for its DID, and calls MethodRegisterRunner, which leaves
// the runner pending until an owner approves it. An existing state file is
// kept unless opts.Force; on any error no state file is written.
func Login(ctx context.Context, opts LoginOptions) (*State, error) {
	if opts.Server == "" || opts.Repo == "" || opts.Name == "" || opts.State == "" || opts.Token == "" {
		return nil, usagef("login needs --server, --repo, --name, --state and --token")
	}
	server := strings.TrimRight(strings.TrimSpace(opts.Server), "/")
	if err := CheckServerURL(server); err != nil {
		return nil, err
	}
	if err := api.CheckRepo(opts.Repo); err != nil {
		return nil, usagef("--repo: %v", err)
	}
	if !opts.Force {
		if _, err := os.Lstat(opts.State); err == nil {
			return nil, fmt.Errorf("state file %s exists: it is another runner identity; use --force to replace it", opts.State)
		}
	}
	var desc api.DescribeServerOutput
	anon := &api.Client{BaseURL: server, HTTP: opts.HTTP, UserAgent: "knotless-run/" + version.Version}
	if err := anon.Query(ctx, api.MethodDescribeServer, nil, &desc); err != nil {
		return nil, fmt.Errorf("ask %s for its DID: %w", server, err)
	}
	if desc.DID == "" {
		return nil, fmt.Errorf("ask %s for its DID: the answer has none", server)
	}
	key, err := svcauth.GenerateKey()
	if err != nil {
		return nil, err
	}
	did, err := svcauth.DIDKey(key)
	if err != nil {
		return nil, err
	}
	labels := []string{}
	for _, l := range opts.Labels {
		if l = strings.TrimSpace(l); l != "" {
			labels = append(labels, l)
		}
	}
	st := &State{
		Server: server, ServerDID: desc.DID, Repo: opts.Repo, Name: opts.Name,
		Labels: labels, DID: did, PrivateKey: key.Multibase(), key: key,
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode runner state: %w", err)
	}
	// Write the state next to its final place first: if registration then
	// fails nothing is left, and if it succeeds the rename cannot fail for
	// lack of space.
	dir := filepath.Dir(opts.State)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create directory of state file: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".knotless-run-state-*")
	if err != nil {
		return nil, fmt.Errorf("write runner state: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write runner state: %w", err)
	}
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write runner state: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write runner state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("write runner state: %w", err)
	}

	in := api.RegisterRunnerInput{Repo: opts.Repo, Name: opts.Name, Labels: labels}
	reg := st.Client(opts.HTTP)
	signed := reg.Auth
	reg.Auth = func(req *http.Request, nsid string) error {
		req.Header.Set(api.RegistrationTokenHeader, opts.Token)
		return signed(req, nsid)
	}
	if err := registerRunner(ctx, reg, in); err != nil {
		if api.IsError(err, api.ErrConflict) && !strings.Contains(err.Error(), "knotless runner remove") {
			return nil, fmt.Errorf("register runner %s for %s: %w: choose another --name, or have an owner remove the old runner first (knotless runner remove %s --repo %s)",
				opts.Name, opts.Repo, err, opts.Name, opts.Repo)
		}
		return nil, fmt.Errorf("register runner %s for %s: %w", opts.Name, opts.Repo, err)
	}
	if opts.Force {
		err = os.Rename(tmp.Name(), opts.State)
	} else {
		err = os.Link(tmp.Name(), opts.State)
		if errors.Is(err, fs.ErrExist) {
			err = fmt.Errorf("state file %s appeared meanwhile; use --force to replace it", opts.State)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("runner %s is registered but its state was not saved (remove it with `knotless runner remove`): %w", opts.Name, err)
	}
	return st, nil
}

// LoginAttempts is how many times Login sends its registration while the
// server answers 503 Service Unavailable: a server that says it did
// nothing (its database's writes kept colliding or did not answer in
// time, ServerBusy; or it holds as many connections as it may), so the
// same request may be sent again. Between attempts Login waits as
// api.RetryWait says (at least the answer's Retry-After, else 200 ms
// doubling, jittered), up to LoginMaxWait each.
const (
	LoginAttempts = 5
	LoginMaxWait  = 15 * time.Second
)

// registerRunner calls dev.knotless.runner.register with in, again while
// the answer is 503 (see LoginAttempts); ctx bounds the waits. It returns
// the last attempt's error, or ctx's.
func registerRunner(ctx context.Context, reg *api.Client, in api.RegisterRunnerInput) error {
	for n := 0; ; n++ {
		err := reg.Procedure(ctx, api.MethodRegisterRunner, in, nil)
		var e *api.Error
		if err == nil || n+1 >= LoginAttempts || !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(api.RetryWait(n, err, LoginMaxWait)):
		}
	}
}
