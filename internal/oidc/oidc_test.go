package oidc

import (
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The example key of RFC 7638 §3.1 has the thumbprint the RFC gives.
func TestThumbprint_MatchesRFC7638Example(t *testing.T) {
	n, _ := base64.RawURLEncoding.DecodeString("0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw")
	pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: 65537}
	if got, want := Thumbprint(pub), "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"; got != want {
		t.Fatalf("thumbprint %s, want %s", got, want)
	}
}

func testClaims(iat time.Time) Claims {
	return Claims{Issuer: "https://ci.example.com", Subject: Subject("alice/app", "refs/heads/main", "push"),
		Audience: Audience{"https://kube.example"}, IssuedAt: iat.Unix(), NotBefore: iat.Add(-ClockSkew).Unix(),
		ExpiresAt: iat.Add(10 * time.Minute).Unix(), ID: TokenID("https://ci.example.com", 7, 1, "DEPLOY", iat.Unix()),
		Repository: "alice/app", RepositoryID: "3", RepositoryOwner: "alice", Ref: "refs/heads/main", RefType: "branch",
		SHA: strings.Repeat("a", 40), Workflow: "deploy", WorkflowPath: ".knotless/workflows/deploy.yml", Event: "push",
		Actor: "alice", ActorCanPush: true, RunID: "7", PipelineID: "5", Runner: "r1"}
}

// verify checks tok's RS256 signature against the JWKS the issuer serves
// and returns its claims.
func verify(t *testing.T, iss *Issuer, tok string, now time.Time) (Claims, error) {
	t.Helper()
	set, err := iss.Keys.Keys()
	if err != nil {
		t.Fatal(err)
	}
	jwks := set.JWKS(now)
	var c Claims
	_, err = jwt.ParseWithClaims(tok, &c, func(tk *jwt.Token) (any, error) {
		for _, k := range jwks.Keys {
			if k.ID == tk.Header["kid"] {
				n, _ := base64.RawURLEncoding.DecodeString(k.N)
				return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: 65537}, nil
			}
		}
		return nil, jwt.ErrTokenUnverifiable
	}, jwt.WithValidMethods([]string{Algorithm}), jwt.WithTimeFunc(func() time.Time { return now }))
	return c, err
}

// A new data directory gets one key, in a file only its owner reads; the
// same claims signed twice give the same token, which verifies with the
// published key and carries every claim.
func TestIssuer_SameClaimsSignTheSameTokenThatVerifies(t *testing.T) {
	dir := t.TempDir()
	kr, err := OpenKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, KeysFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("keys file: %v, mode %v; want 0600", err, fi.Mode())
	}
	iss := &Issuer{URL: "https://ci.example.com", Keys: kr}
	now := time.Now()
	a, kid, err := iss.Sign(testClaims(now), now)
	if err != nil {
		t.Fatal(err)
	}
	b, _, _ := iss.Sign(testClaims(now), now.Add(time.Minute))
	if a != b {
		t.Fatalf("the same claims gave two tokens:\n%s\n%s", a, b)
	}
	c, err := verify(t, iss, a, now)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if w := testClaims(now); !reflect.DeepEqual(c, w) {
		t.Errorf("claims %+v, want %+v", c, w)
	}
	if c.Subject != "repo:alice/app:ref:refs/heads/main" || !c.ActorCanPush || c.RepositoryID != "3" || c.NotBefore != now.Unix()-30 {
		t.Errorf("claims %+v", c)
	}
	hdr, _ := base64.RawURLEncoding.DecodeString(strings.Split(a, ".")[0])
	var h map[string]string
	_ = json.Unmarshal(hdr, &h)
	if h["alg"] != "RS256" || h["kid"] != kid || h["typ"] != "JWT" {
		t.Errorf("header %s", hdr)
	}
	// Another process reading the same directory signs the same token.
	kr2, err := OpenKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c, _, _ := (&Issuer{URL: iss.URL, Keys: kr2}).Sign(testClaims(now), now); c != a {
		t.Errorf("a second keyring on the directory signs another token")
	}
}

// After a rotation the JWKS has both keys until the grace ends; a token
// issued before the rotation is signed again with the old key (so it is
// the same token), a new one with the new key; past the grace only the
// new key is published and every token signs with it.
func TestRotate_OldKeyPublishedDuringGraceThenDropped(t *testing.T) {
	dir := t.TempDir()
	kr, err := OpenKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	iss := &Issuer{URL: "https://ci.example.com", Keys: kr}
	before := time.Now().Add(-time.Minute)
	old, oldKid, err := iss.Sign(testClaims(before), before)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second).Add(time.Second)
	rot, err := Rotate(dir, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if rot.Retired.ID != oldKid || rot.Current.ID == oldKid || len(rot.Dropped) != 0 {
		t.Fatalf("rotation %+v, want %s retired", rot, oldKid)
	}
	set, _ := kr.Keys()
	if got := set.JWKS(now.Add(time.Minute)); len(got.Keys) != 2 || got.Keys[0].ID != rot.Current.ID || got.Keys[1].ID != oldKid {
		t.Fatalf("JWKS during the grace %+v", got)
	}
	again, kid, _ := iss.Sign(testClaims(before), now.Add(time.Minute))
	if again != old || kid != oldKid {
		t.Errorf("a token issued before the rotation signs with %s, want the old key %s, the same token", kid, oldKid)
	}
	if _, kid, _ := iss.Sign(testClaims(now.Add(time.Second)), now.Add(time.Minute)); kid != rot.Current.ID {
		t.Errorf("a new token signs with %s, want the new key", kid)
	}
	past := now.Add(time.Hour + time.Second)
	if got := set.JWKS(past); len(got.Keys) != 1 || got.Keys[0].ID != rot.Current.ID {
		t.Errorf("JWKS after the grace %+v, want the new key alone", got)
	}
	if _, kid, _ := iss.Sign(testClaims(before), past); kid != rot.Current.ID {
		t.Errorf("after the grace an old issue time signs with %s, want the new key", kid)
	}
	// The next rotation removes the key whose publication ended.
	rot2, err := Rotate(dir, past, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(rot2.Dropped) != 1 || rot2.Dropped[0].ID != oldKid {
		t.Errorf("second rotation dropped %+v, want %s", rot2.Dropped, oldKid)
	}
	set, _ = kr.Keys()
	if n := len(set.All()); n != 2 {
		t.Errorf("%d keys in the file, want 2", n)
	}
}

// A rotation with no grace (a leaked key) unpublishes the old key at once.
func TestRotate_NoGraceDropsTheOldKeyAtOnce(t *testing.T) {
	dir := t.TempDir()
	kr, err := OpenKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := kr.Keys()
	rot, err := Rotate(dir, time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rot.Dropped) != 1 || rot.Dropped[0].ID != first.Current().ID {
		t.Fatalf("dropped %+v, want the old key", rot.Dropped)
	}
	set, _ := kr.Keys()
	if got := set.JWKS(time.Now()); len(got.Keys) != 1 || got.Keys[0].ID != rot.Current.ID {
		t.Errorf("JWKS %+v, want the new key alone", got)
	}
}

// A keys file whose kid does not match its key is refused, naming it.
func TestOpenKeyring_RefusesAKidThatIsNotTheKeysThumbprint(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenKeyring(dir); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, KeysFile)
	b, _ := os.ReadFile(p)
	var f keyFile
	_ = json.Unmarshal(b, &f)
	f.Keys[0].ID = "forged"
	b, _ = json.Marshal(f)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := OpenKeyring(dir)
	if err == nil || !strings.Contains(err.Error(), `kid "forged"`) {
		t.Fatalf("err %v, want the forged kid named", err)
	}
}

// The configuration names the issuer, its JWKS and RS256; both answers
// may be cached briefly.
func TestIssuer_ServesConfigurationAndJWKS(t *testing.T) {
	kr, err := OpenKeyring(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	iss := &Issuer{URL: "https://ci.example.com/knotless", Keys: kr}
	rec := httptest.NewRecorder()
	iss.ServeConfiguration(rec, httptest.NewRequest(http.MethodGet, DiscoveryPath, nil))
	var c Configuration
	if err := json.Unmarshal(rec.Body.Bytes(), &c); err != nil {
		t.Fatal(err)
	}
	if c.Issuer != iss.URL || c.JWKSURI != iss.URL+JWKSPath || c.IDTokenSigningAlgValuesSupported[0] != "RS256" {
		t.Errorf("configuration %+v", c)
	}
	rec = httptest.NewRecorder()
	iss.ServeJWKS(nil)(rec, httptest.NewRequest(http.MethodGet, JWKSPath, nil))
	var ks JWKS
	if err := json.Unmarshal(rec.Body.Bytes(), &ks); err != nil || len(ks.Keys) != 1 || ks.Keys[0].E != "AQAB" || ks.Keys[0].KeyType != "RSA" {
		t.Errorf("JWKS %s (%v)", rec.Body.Bytes(), err)
	}
	if cc := rec.Header().Get("Cache-Control"); !strings.Contains(cc, "max-age") {
		t.Errorf("Cache-Control %q", cc)
	}
}

// BenchmarkIssuer_Sign is the signature alone (RS256, 2048-bit key): the
// floor of what a token costs the server.
func BenchmarkIssuer_Sign(b *testing.B) {
	kr, err := OpenKeyring(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	iss := &Issuer{URL: "https://ci.example.com", Keys: kr}
	now := time.Now()
	for b.Loop() {
		if _, _, err := iss.Sign(testClaims(now), now); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}
