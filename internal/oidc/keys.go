package oidc

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// KeysFile is the file in the server's data directory that holds the
// signing keys (mode 0600, shared by replicas like server.key).
const KeysFile = "oidc-keys.json"

// Algorithm is the JWS algorithm of every token: RS256, RSASSA-PKCS1-v1_5
// with SHA-256 (RFC 7518 §3.3), which Kubernetes, AWS, Google Cloud and
// Azure all accept. Its signatures are deterministic: the same claims and
// key give the same token.
const Algorithm = "RS256"

// KeyBits is the RSA modulus size of new keys.
const KeyBits = 2048

// MaxLifetime bounds the lifetime of every token (workflow.MaxIDTokenLifetime
// is the same bound, checked when a workflow is parsed).
const MaxLifetime = 24 * time.Hour

// DefaultGrace is how long Rotate keeps a retired key published by
// default: longer than any token it signed can live, with room for clocks
// that disagree.
const DefaultGrace = MaxLifetime + 5*time.Minute

// Key is one signing key of the issuer.
type Key struct {
	// ID is the key's "kid": its JWK thumbprint (RFC 7638, SHA-256).
	ID string
	// Created is when the key became the current one.
	Created time.Time
	// Retired is when a newer key replaced it; zero for the current key.
	Retired time.Time
	// PublishUntil is when a retired key leaves the JWKS; zero for the
	// current key.
	PublishUntil time.Time

	priv *rsa.PrivateKey
}

// Public returns the key's public half.
func (k Key) Public() *rsa.PublicKey { return &k.priv.PublicKey }

// KeySet is the keys of one version of the keys file, newest first; the
// first is the current key.
type KeySet struct {
	keys []Key
}

// Current is the key new tokens are signed with.
func (s *KeySet) Current() Key { return s.keys[0] }

// All returns every key of the file, newest first.
func (s *KeySet) All() []Key { return append([]Key(nil), s.keys...) }

// published reports whether k is in the JWKS at now.
func published(k Key, now time.Time) bool {
	return k.PublishUntil.IsZero() || now.Before(k.PublishUntil)
}

// Published returns the keys a relying party may verify tokens with at
// now: the current key and the retired ones before their PublishUntil.
func (s *KeySet) Published(now time.Time) []Key {
	var out []Key
	for _, k := range s.keys {
		if published(k, now) {
			out = append(out, k)
		}
	}
	return out
}

// ForTime returns the key that was current at t (a token's issue time)
// among those still published at now, so that a token made again for the
// same t has the same signature; for a t before all of them, the oldest
// of them.
func (s *KeySet) ForTime(t, now time.Time) Key {
	pub := s.Published(now)
	if len(pub) == 0 {
		return s.keys[0]
	}
	for _, k := range pub {
		if !k.Created.After(t) {
			return k
		}
	}
	return pub[len(pub)-1]
}

// fileKey is one key as the keys file holds it.
type fileKey struct {
	ID           string     `json:"kid"`
	Created      time.Time  `json:"created"`
	Retired      *time.Time `json:"retired,omitempty"`
	PublishUntil *time.Time `json:"publishUntil,omitempty"`
	// PrivateKey is the PEM of a PKCS #8 RSA private key.
	PrivateKey string `json:"privateKey"`
}

type keyFile struct {
	Keys []fileKey `json:"keys"`
}

// newFileKey makes a new RSA key, current from now.
func newFileKey(now time.Time) (fileKey, error) {
	priv, err := rsa.GenerateKey(rand.Reader, KeyBits)
	if err != nil {
		return fileKey{}, fmt.Errorf("make an RSA key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return fileKey{}, fmt.Errorf("encode an RSA key: %w", err)
	}
	return fileKey{ID: Thumbprint(&priv.PublicKey), Created: now.UTC().Truncate(time.Second),
		PrivateKey: string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))}, nil
}

// parseKeys reads a keys file. A file whose keys do not match their kids,
// are not RSA keys of at least KeyBits, or whose newest key is retired is
// refused, naming the problem.
func parseKeys(path string, b []byte) (*KeySet, error) {
	var f keyFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: not a keys file (%v): restore it from a backup, or remove it to make a new key (relying parties must then fetch the new one)", path, err)
	}
	if len(f.Keys) == 0 {
		return nil, fmt.Errorf("%s holds no key: remove it to make a new one", path)
	}
	set := &KeySet{}
	for i, fk := range f.Keys {
		blk, _ := pem.Decode([]byte(fk.PrivateKey))
		if blk == nil {
			return nil, fmt.Errorf("%s: key %d (%s) has no PEM private key", path, i+1, fk.ID)
		}
		any, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: key %d (%s): %w", path, i+1, fk.ID, err)
		}
		priv, ok := any.(*rsa.PrivateKey)
		if !ok || priv.N.BitLen() < KeyBits {
			return nil, fmt.Errorf("%s: key %d (%s) is not an RSA key of at least %d bits", path, i+1, fk.ID, KeyBits)
		}
		if tp := Thumbprint(&priv.PublicKey); tp != fk.ID {
			return nil, fmt.Errorf("%s: key %d has kid %q, but its thumbprint is %q (edited by hand?)", path, i+1, fk.ID, tp)
		}
		k := Key{ID: fk.ID, Created: fk.Created, priv: priv}
		if fk.Retired != nil {
			k.Retired = *fk.Retired
		}
		if fk.PublishUntil != nil {
			k.PublishUntil = *fk.PublishUntil
		}
		if i == 0 && !k.Retired.IsZero() {
			return nil, fmt.Errorf("%s: the newest key %s is retired: rotate to make a current one", path, k.ID)
		}
		set.keys = append(set.keys, k)
	}
	return set, nil
}

// Thumbprint is the RFC 7638 JWK thumbprint of an RSA public key (SHA-256,
// base64url without padding): the kid of the issuer's keys.
func Thumbprint(pub *rsa.PublicKey) string {
	// The required members in lexicographic order, no white space (RFC 7638 §3.2).
	canon := `{"e":"` + b64(big.NewInt(int64(pub.E)).Bytes()) + `","kty":"RSA","n":"` + b64(pub.N.Bytes()) + `"}`
	sum := sha256.Sum256([]byte(canon))
	return b64(sum[:])
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// stamp identifies one version of a file.
type stamp struct {
	dev, ino uint64
	size     int64
	mtime    int64
}

func stampOf(fi os.FileInfo) stamp {
	s := stamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.dev, s.ino = uint64(st.Dev), st.Ino
	}
	return s
}

// Keyring is the keys file of one data directory, read again whenever it
// changes (a rotation by `knotless-server oidc-keys rotate`, or by another
// replica). Its methods are safe for concurrent use.
type Keyring struct {
	path string
	mu   sync.Mutex
	set  *KeySet
	at   stamp
}

// OpenKeyring reads DIR/KeysFile, creating it with one new key when it is
// missing: written whole under another name and linked into place, so that
// a replica starting at the same moment reads either nothing or the whole
// file, never a part (the one that loses reads the winner's).
func OpenKeyring(dir string) (*Keyring, error) {
	k := &Keyring{path: filepath.Join(dir, KeysFile)}
	if _, err := os.Stat(k.path); errors.Is(err, os.ErrNotExist) {
		fk, err := newFileKey(time.Now())
		if err != nil {
			return nil, err
		}
		b, err := encodeKeys(keyFile{Keys: []fileKey{fk}})
		if err != nil {
			return nil, err
		}
		tmp := k.path + "." + strconv.Itoa(os.Getpid()) + "." + fk.ID[:8] + ".tmp"
		if err := writeSynced(tmp, b); err != nil {
			return nil, err
		}
		err = os.Link(tmp, k.path)
		os.Remove(tmp)
		if err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("create %s: %w", k.path, err)
		}
	}
	if _, err := k.Keys(); err != nil {
		return nil, err
	}
	return k, nil
}

// Path is the keys file's path.
func (k *Keyring) Path() string { return k.path }

// Keys returns the keys as the file holds them now, reading it again when
// it changed since the last call (one stat per call otherwise). When the
// file cannot be read any more, it returns the last keys it read with the
// error (nil keys when it never read any).
func (k *Keyring) Keys() (*KeySet, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	fi, err := os.Stat(k.path)
	if err != nil {
		return k.set, fmt.Errorf("read the id token keys: %w", err)
	}
	if st := stampOf(fi); k.set == nil || st != k.at {
		b, err := os.ReadFile(k.path)
		if err != nil {
			return k.set, fmt.Errorf("read the id token keys: %w", err)
		}
		set, err := parseKeys(k.path, b)
		if err != nil {
			return k.set, err
		}
		k.set, k.at = set, st
	}
	return k.set, nil
}

// Rotation is what Rotate did.
type Rotation struct {
	// Current is the new key; Retired the key it replaced (zero ID when the
	// file was new), published until its PublishUntil.
	Current, Retired Key
	// Dropped are keys no longer published, removed from the file.
	Dropped []Key
}

// Rotate makes a new current key in DIR/KeysFile at now. The key it
// replaces stays published for grace (DefaultGrace is longer than any
// token lives), so that tokens it signed verify until they expire; grace
// <= 0 drops it at once, for a key that leaked: every token it signed is
// refused from then on (once relying parties fetch the keys again). Keys
// whose publication ended are removed. The file is written whole (a new
// file renamed into place), under an exclusive lock of
// DIR/oidc-keys.lock, so rotations on one directory happen one after the
// other; running servers pick the new key up at their next token.
func Rotate(dir string, now time.Time, grace time.Duration) (Rotation, error) {
	path := filepath.Join(dir, KeysFile)
	lock, err := os.OpenFile(filepath.Join(dir, "oidc-keys.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return Rotation{}, fmt.Errorf("lock the id token keys: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return Rotation{}, fmt.Errorf("lock the id token keys: %w", err)
	}
	var f keyFile
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return Rotation{}, fmt.Errorf("read %s: %w", path, err)
	default:
		if _, err := parseKeys(path, b); err != nil {
			return Rotation{}, err
		}
		if err := json.Unmarshal(b, &f); err != nil {
			return Rotation{}, err
		}
	}
	now = now.UTC().Truncate(time.Second)
	var out Rotation
	var kept []fileKey
	for i, fk := range f.Keys {
		if i == 0 {
			r, until := now, now.Add(max(grace, 0))
			fk.Retired, fk.PublishUntil = &r, &until
			out.Retired = Key{ID: fk.ID, Created: fk.Created, Retired: r, PublishUntil: until}
		}
		if !fk.PublishUntil.After(now) {
			out.Dropped = append(out.Dropped, Key{ID: fk.ID, Created: fk.Created, Retired: *fk.Retired, PublishUntil: *fk.PublishUntil})
			continue
		}
		kept = append(kept, fk)
	}
	nk, err := newFileKey(now)
	if err != nil {
		return Rotation{}, err
	}
	f.Keys = append([]fileKey{nk}, kept...)
	nb, err := encodeKeys(f)
	if err != nil {
		return Rotation{}, err
	}
	tmp := path + ".rotate.tmp"
	if err := writeSynced(tmp, nb); err != nil {
		return Rotation{}, err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return Rotation{}, fmt.Errorf("replace %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	set, err := parseKeys(path, nb)
	if err != nil {
		return Rotation{}, err
	}
	out.Current = set.keys[0]
	return out, nil
}

func encodeKeys(f keyFile) ([]byte, error) {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode the id token keys: %w", err)
	}
	return append(b, '\n'), nil
}

// writeSynced writes a new file (mode 0600, failing if it exists) and
// syncs it.
func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
