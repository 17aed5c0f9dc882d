package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/web"
)

// browser is an HTTP client with a cookie jar that does not follow
// redirects, signed in to the web pages as one account.
type browser struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, c: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// signIn posts the sign-in form with token; it returns the answer.
func (b *browser) signIn(token string) *http.Response {
	b.t.Helper()
	resp, err := b.c.PostForm(b.base+"/-/login", url.Values{"token": {token}, "next": {"/"}})
	if err != nil {
		b.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func signedIn(t *testing.T, base, token string) *browser {
	t.Helper()
	b := newBrowser(t, base)
	if resp := b.signIn(token); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %s, want 303", resp.Status)
	}
	return b
}

func (b *browser) get(path string) (int, string) {
	b.t.Helper()
	resp, err := b.c.Get(b.base + path)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(body)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf reads the form token from the home page.
func (b *browser) csrf() string {
	b.t.Helper()
	_, body := b.get("/")
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		b.t.Fatalf("no csrf form token on the home page:\n%s", body)
	}
	return m[1]
}

func (b *browser) post(path string, form url.Values, header ...string) int {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestWeb_SignInSetsHttpOnlyLaxSessionCookie(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	b := newBrowser(t, f.URL)
	resp := b.signIn(f.token)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %s", resp.Status)
	}
	var c *http.Cookie
	for _, x := range resp.Cookies() {
		if x.Name == web.CookieName {
			c = x
		}
	}
	if c == nil || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Secure || c.Path != "/" {
		t.Fatalf("session cookie = %+v, want HttpOnly, SameSite=Lax, Path=/, not Secure over plain HTTP", c)
	}
	if strings.Contains(c.Value, f.token) {
		t.Fatal("the cookie holds the API token")
	}
	if code, body := b.get("/"); code != 200 || !strings.Contains(body, "alice/app") {
		t.Fatalf("home page: %d\n%s", code, body)
	}
}

func TestWeb_SessionCookieSecureWhenServedOverHTTPS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv, err := server.New(context.Background(), quietConfig(t, dir, "https://ci.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	tok := readAdminToken(t, dir)
	req := httptest.NewRequest(http.MethodPost, "https://ci.example.com/-/login", strings.NewReader(url.Values{"token": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusSeeOther {
		t.Fatalf("sign in: %d %s", rec.Code, rec.Body)
	}
	set := rec.Header().Get("Set-Cookie")
	for _, want := range []string{"HttpOnly", "Secure", "SameSite=Lax"} {
		if !strings.Contains(set, want) {
			t.Errorf("Set-Cookie %q lacks %s", set, want)
		}
	}
}

func TestWeb_UnknownTokenRefusedAtSignIn(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	b := newBrowser(t, f.URL)
	if resp := b.signIn("knl_nosuchtoken"); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Fatalf("sign in with an unknown token: %s, cookies %v; want 401, none", resp.Status, resp.Cookies())
	}
	if code, _ := b.get("/alice/app"); code != http.StatusSeeOther {
		t.Fatalf("pipelines without a session: %d, want 303 to the sign-in form", code)
	}
}

func TestWeb_SignOutEndsSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	b := signedIn(t, f.URL, f.token)
	u, _ := url.Parse(f.URL)
	old := b.c.Jar.Cookies(u)
	if code := b.post("/-/logout", url.Values{"csrf": {b.csrf()}}); code != http.StatusSeeOther {
		t.Fatalf("sign out: %d", code)
	}
	// The old cookie, kept by someone, opens nothing any more.
	b2 := newBrowser(t, f.URL)
	b2.c.Jar.SetCookies(u, old)
	if code, _ := b2.get("/alice/app"); code != http.StatusSeeOther {
		t.Fatalf("pipelines with a signed-out session's cookie: %d, want 303 to sign in", code)
	}
}

func TestWeb_RevokedTokenEndsItsSessions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	var made api.CreateTokenOutput
	if err := f.alice().Procedure(context.Background(), api.MethodCreateToken, api.CreateTokenInput{Name: "web"}, &made); err != nil {
		t.Fatal(err)
	}
	b := signedIn(t, f.URL, made.Secret)
	if code, _ := b.get("/alice/app"); code != 200 {
		t.Fatalf("pipelines: %d", code)
	}
	if err := f.alice().Procedure(context.Background(), api.MethodRevokeToken, api.RevokeTokenInput{Name: "web"}, nil); err != nil {
		t.Fatal(err)
	}
	if code, _ := b.get("/alice/app"); code != http.StatusSeeOther {
		t.Fatalf("pipelines after the token was revoked: %d, want 303 to sign in", code)
	}
}

func TestWeb_DisabledAccountEndsItsSessions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	b := signedIn(t, f.URL, f.token)
	if err := f.Admin().Procedure(context.Background(), api.MethodDisableAccount, api.AccountRef{Handle: "alice"}, nil); err != nil {
		t.Fatal(err)
	}
	if code, _ := b.get("/alice/app"); code != http.StatusSeeOther {
		t.Fatalf("pipelines of a disabled account: %d, want 303 to sign in", code)
	}
}

func TestWeb_PostWithoutFormTokenRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	run := queueOne(t, f, "")
	b := signedIn(t, f.URL, f.token)
	if code := b.post(fmt.Sprintf("/-/runs/%d/cancel", run.ID), url.Values{}); code != http.StatusForbidden {
		t.Fatalf("cancel without the form token: %d, want 403", code)
	}
	if code := b.post(fmt.Sprintf("/-/runs/%d/cancel", run.ID), url.Values{"csrf": {"forged"}}); code != http.StatusForbidden {
		t.Fatalf("cancel with a wrong form token: %d, want 403", code)
	}
	if got := f.WaitRun(t, run.ID, time.Second, func(api.Run) bool { return true }); got.State != api.StateQueued {
		t.Fatalf("run after refused cancels: %s, want queued", got.State)
	}
}

func TestWeb_CrossSitePostRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	run := queueOne(t, f, "")
	b := signedIn(t, f.URL, f.token)
	form := url.Values{"csrf": {b.csrf()}}
	if code := b.post(fmt.Sprintf("/-/runs/%d/cancel", run.ID), form, "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
		t.Fatalf("cross-site cancel: %d, want 403", code)
	}
	if code := b.post(fmt.Sprintf("/-/runs/%d/cancel", run.ID), form, "Origin", "https://evil.example"); code != http.StatusForbidden {
		t.Fatalf("cancel from another origin: %d, want 403", code)
	}
	if got := f.WaitRun(t, run.ID, time.Second, func(api.Run) bool { return true }); got.State != api.StateQueued {
		t.Fatalf("run after cross-site cancels: %s, want queued", got.State)
	}
	if code := b.post(fmt.Sprintf("/-/runs/%d/cancel", run.ID), form, "Sec-Fetch-Site", "same-origin"); code != http.StatusSeeOther {
		t.Fatalf("same-origin cancel with the form token: %d, want 303", code)
	}
	f.WaitRun(t, run.ID, 5*time.Second, func(r api.Run) bool { return r.State == api.StateCancelled })
}

// strangerFixture: alice's repository with a run that has a log, an
// approved and a pending runner, and bob, who owns nothing of it.
func strangerFixture(t *testing.T) (*fixture, *browser, int64) {
	t.Helper()
	f := newFixture(t, servertest.Options{})
	r, c := claimedRun(t, f)
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: c.Run.ID, Step: 1, Name: "build", State: api.StepRunning}, nil)
	if _, err := appendLog(r, c.Run.ID, 1, 0, "secret-ish build output\n"); err != nil {
		t.Fatal(err)
	}
	f.RegisterRunner(t, f.repo, "pending1", nil, false)
	bob := f.CreateAccount(t, "bob")
	return f, signedIn(t, f.URL, bob), c.Run.ID
}

func TestWeb_StrangerGets404ForPipelines(t *testing.T) {
	t.Parallel()
	f, bob, _ := strangerFixture(t)
	for _, p := range []string{"/alice/app", "/alice/app?before=5", "/alice/nosuchrepo"} {
		if code, body := bob.get(p); code != http.StatusNotFound || strings.Contains(body, "app.git") {
			t.Errorf("bob GET %s: %d, want 404", p, code)
		}
	}
	if _, body := bob.get("/"); strings.Contains(body, "alice/app") {
		t.Error("bob's home page lists alice/app")
	}
	_ = f
}

func TestWeb_StrangerGets404ForRunLogAndOutputs(t *testing.T) {
	t.Parallel()
	_, bob, id := strangerFixture(t)
	for _, p := range []string{"/-/runs/%d", "/-/runs/%d/events", "/-/runs/%d/log/1?before=10", "/-/runs/%d/log/1/raw", "/-/runs/%d/outputs.tar"} {
		path := fmt.Sprintf(p, id)
		code, body := bob.get(path)
		if code != http.StatusNotFound || strings.Contains(body, "build output") {
			t.Errorf("bob GET %s: %d, want 404 without the log", path, code)
		}
		// Exactly what a run that does not exist answers.
		if code2, _ := bob.get(fmt.Sprintf(p, id+1000)); code2 != code {
			t.Errorf("GET %s of a missing run: %d, of alice's run: %d; want the same", fmt.Sprintf(p, id+1000), code2, code)
		}
	}
}

func TestWeb_StrangerCannotCancelRun(t *testing.T) {
	t.Parallel()
	f, bob, id := strangerFixture(t)
	if code := bob.post(fmt.Sprintf("/-/runs/%d/cancel", id), url.Values{"csrf": {bob.csrf()}}); code != http.StatusNotFound {
		t.Fatalf("bob cancels alice's run: %d, want 404", code)
	}
	if got := f.WaitRun(t, id, time.Second, func(api.Run) bool { return true }); got.State != api.StateRunning {
		t.Fatalf("run after bob's cancel: %s, want running", got.State)
	}
}

func TestWeb_StrangerGets404ForRunnersAndCannotApproveOrRemove(t *testing.T) {
	t.Parallel()
	f, bob, _ := strangerFixture(t)
	if code, _ := bob.get("/alice/app/-/runners"); code != http.StatusNotFound {
		t.Fatalf("bob GET runners: %d, want 404", code)
	}
	var list api.ListRunnersOutput
	if err := f.alice().Query(context.Background(), api.MethodListRunners, url.Values{"repo": {f.repo}}, &list); err != nil {
		t.Fatal(err)
	}
	var pending api.Runner
	for _, x := range list.Runners {
		if x.Name == "pending1" {
			pending = x
		}
	}
	csrf := bob.csrf()
	if code := bob.post("/alice/app/-/runners/approve", url.Values{"csrf": {csrf}, "name": {"pending1"}, "did": {pending.DID}}); code != http.StatusNotFound {
		t.Errorf("bob approves: %d, want 404", code)
	}
	if code := bob.post("/alice/app/-/runners/remove", url.Values{"csrf": {csrf}, "name": {"r1"}}); code != http.StatusNotFound {
		t.Errorf("bob removes: %d, want 404", code)
	}
	if err := f.alice().Query(context.Background(), api.MethodListRunners, url.Values{"repo": {f.repo}}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Runners) != 2 {
		t.Fatalf("runners after bob's remove: %d, want 2", len(list.Runners))
	}
	for _, x := range list.Runners {
		if x.Name == "pending1" && x.Status != api.RunnerPending {
			t.Fatalf("pending1 after bob's approve: %s", x.Status)
		}
	}
}

func TestWeb_AdminSeesEveryRepositoryAndRun(t *testing.T) {
	t.Parallel()
	f, _, id := strangerFixture(t)
	admin := signedIn(t, f.URL, f.AdminToken)
	for _, p := range []string{"/alice/app", "/alice/app/-/runners", fmt.Sprintf("/-/runs/%d", id)} {
		if code, _ := admin.get(p); code != 200 {
			t.Errorf("admin GET %s: %d, want 200", p, code)
		}
	}
}

func TestWeb_ApproveNeedsTheDIDShown(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	f.RegisterRunner(t, f.repo, "p1", nil, false)
	b := signedIn(t, f.URL, f.token)
	_, page := b.get("/alice/app/-/runners")
	if !strings.Contains(page, "did:key:") {
		t.Fatalf("the Runners tab does not show the pending runner's DID:\n%s", page)
	}
	if code := b.post("/alice/app/-/runners/approve", url.Values{"csrf": {b.csrf()}, "name": {"p1"}, "did": {"did:key:zOther"}}); code != http.StatusConflict {
		t.Fatalf("approve with another DID: %d, want 409", code)
	}
}

func TestWeb_PagesForbidInlineScripts(t *testing.T) {
	t.Parallel()
	f, _, id := strangerFixture(t)
	b := signedIn(t, f.URL, f.token)
	inline := regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]|\son[a-z]+=`)
	for _, p := range []string{"/", "/-/login", "/alice/app", "/alice/app/-/runners", fmt.Sprintf("/-/runs/%d", id)} {
		resp, err := b.c.Get(f.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("%s: CSP %q", p, csp)
		}
		if inline.Match(body) {
			t.Errorf("%s has an inline script or event handler", p)
		}
		if len(body) > 100<<10 {
			t.Errorf("%s is %d bytes, over 100 KB", p, len(body))
		}
	}
}

// sseEvent is one server-sent event.
type sseEvent struct{ id, name, data string }

func readEvents(t *testing.T, r *bufio.Reader, until func(sseEvent) bool) []sseEvent {
	t.Helper()
	var out []sseEvent
	var ev sseEvent
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read events: %v (so far %v)", err, out)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if ev.name != "" {
				out = append(out, ev)
				if until(ev) {
					return out
				}
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.name = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.data = line[6:]
		}
	}
}

func (b *browser) events(t *testing.T, ctx context.Context, run int64, lastID string) *bufio.Reader {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/-/runs/%d/events?from=0:0,1:0", b.base, run), nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("events: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	return bufio.NewReader(resp.Body)
}

func TestWeb_RunEventsResumeAtLastEventIDWithoutRepeatOrGap(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r, c := claimedRun(t, f)
	id := c.Run.ID
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: id, Step: 1, Name: "build", State: api.StepRunning}, nil)
	if _, err := appendLog(r, id, 1, 0, "one\ntwo\nthr"); err != nil {
		t.Fatal(err)
	}
	b := signedIn(t, f.URL, f.token)
	ctx, cancel := context.WithCancel(context.Background())
	evs := readEvents(t, b.events(t, ctx, id, ""), func(e sseEvent) bool { return e.name == "log" })
	last := evs[len(evs)-1]
	if !strings.Contains(last.data, `"text":"one\ntwo\n"`) || last.id != "1:8" && !strings.HasSuffix(last.id, ",1:8") {
		t.Fatalf("first log event = %+v, want the two whole lines and id ending 1:8 (a partial line waits)", last)
	}
	cancel() // the browser loses its connection
	if _, err := appendLog(r, id, 1, 11, "ee\nfour\n"); err != nil {
		t.Fatal(err)
	}
	evs = readEvents(t, b.events(t, context.Background(), id, last.id), func(e sseEvent) bool { return e.name == "log" })
	got := evs[len(evs)-1]
	if !strings.Contains(got.data, `"off":8`) || !strings.Contains(got.data, `"text":"three\nfour\n"`) {
		t.Fatalf("after reconnecting with Last-Event-ID %s: %+v, want exactly three\\nfour\\n from byte 8", last.id, got)
	}
}

func readAdminToken(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, server.AdminTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// An open event stream (a browser following a run) once kept the server's
// shutdown waiting for its 30 s grace: streams end when the server closes.
func TestWeb_OpenEventStreamDoesNotHoldServerShutdown(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r, c := claimedRun(t, f)
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: c.Run.ID, Step: 1, Name: "build", State: api.StepRunning}, nil)
	b := signedIn(t, f.URL, f.token)
	stream := b.events(t, context.Background(), c.Run.ID, "")
	readEvents(t, stream, func(e sseEvent) bool { return e.name == "run" })
	stopped := make(chan struct{})
	go func() { f.Stop(); close(stopped) }()
	if _, err := io.Copy(io.Discard, stream); err != nil && !strings.Contains(err.Error(), "EOF") {
		t.Logf("stream ended: %v", err)
	}
	<-stopped // servertest fails the test when Serve gave up waiting for the stream
}

func (b *browser) getBytes(path string) (*http.Response, []byte) {
	b.t.Helper()
	resp, err := b.c.Get(b.base + path)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return resp, body
}

func TestWeb_RawLogAndOutputsDownloadExactBytes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r, c := claimedRun(t, f)
	id := c.Run.ID
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: id, Step: 1, Name: "build", State: api.StepRunning}, nil)
	raw := "plain\n\x1b[31mred\x1b[0m\n\xff\xfe not utf-8\n<script>x</script>\n"
	if _, err := appendLog(r, id, 1, 0, raw); err != nil {
		t.Fatal(err)
	}
	a := testArchive(t, 1000)
	if out, err := upload(r.Client, id, 0, int64(len(a)), sha(a), a); err != nil || !out.Stored {
		t.Fatalf("upload outputs: %+v, %v", out, err)
	}
	b := signedIn(t, f.URL, f.token)
	resp, body := b.getBytes(fmt.Sprintf("/-/runs/%d/log/1/raw", id))
	if resp.StatusCode != 200 || string(body) != raw || !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment") ||
		resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("raw log: %s %q %q, want the exact bytes as an attachment", resp.Status, resp.Header, body)
	}
	_, page := b.get(fmt.Sprintf("/-/runs/%d", id))
	for _, want := range []string{fmt.Sprintf(`href="/-/runs/%d/outputs.tar"`, id), "dist/app.bin", "coverage.out", sha(a)} {
		if !strings.Contains(page, want) {
			t.Errorf("run page lacks %q", want)
		}
	}
	resp, body = b.getBytes(fmt.Sprintf("/-/runs/%d/outputs.tar", id))
	if resp.StatusCode != 200 || string(body) != string(a) || !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment") {
		t.Fatalf("outputs download: %s, %d bytes, want the archive's %d as an attachment", resp.Status, len(body), len(a))
	}
}

// A long log is never sent whole: the page starts at a line in its last
// 256 KiB, the stream sends from there, and earlier parts come in pieces
// that end exactly where the shown part starts.
func TestWeb_LongLogOpensAtItsTailAndLoadsEarlierParts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r, c := claimedRun(t, f)
	id := c.Run.ID
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: id, Step: 1, Name: "build", State: api.StepRunning}, nil)
	var log strings.Builder
	for i := 1; log.Len() < 3<<20; i++ {
		fmt.Fprintf(&log, "line %07d of a long log\n", i)
	}
	all := log.String()
	for off := 0; off < len(all); off += 1 << 20 {
		if _, err := appendLog(r, id, 1, int64(off), all[off:min(off+1<<20, len(all))]); err != nil {
			t.Fatal(err)
		}
	}
	b := signedIn(t, f.URL, f.token)
	code, page := b.get(fmt.Sprintf("/-/runs/%d", id))
	m := regexp.MustCompile(`id="step-1" data-step="1" data-start="(\d+)"`).FindStringSubmatch(page)
	if code != 200 || m == nil {
		t.Fatalf("run page %d has no start for step 1", code)
	}
	start, _ := strconv.Atoi(m[1])
	if start <= 0 || len(all)-start > web.DefaultLogTail || all[start-1] != '\n' {
		t.Fatalf("step 1 starts at byte %d of %d, want a line's start within the last %d bytes", start, len(all), web.DefaultLogTail)
	}
	if len(page) > 100<<10 {
		t.Fatalf("run page is %d bytes", len(page))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/-/runs/%d/events?from=0:0,1:%d", f.URL, id, start), nil)
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var streamed int
	readEvents(t, bufio.NewReader(resp.Body), func(e sseEvent) bool {
		if e.name == "log" && strings.Contains(e.data, `"step":1`) {
			var ev struct {
				Off  int64
				Text string
			}
			if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
				t.Fatal(err)
			}
			if int(ev.Off) != start+streamed {
				t.Fatalf("log event at %d, want %d", ev.Off, start+streamed)
			}
			streamed += len(ev.Text)
		}
		return start+streamed == len(all)
	})
	// Earlier parts, walked back to the start, join up to the whole log.
	got := ""
	for before := start; before > 0; {
		resp, body := b.getBytes(fmt.Sprintf("/-/runs/%d/log/1?before=%d", id, before))
		var ev struct {
			Off, End int64
			Text     string
		}
		if err := json.Unmarshal(body, &ev); err != nil || resp.StatusCode != 200 || int(ev.End) != before || before-int(ev.Off) > web.DefaultLogTail {
			t.Fatalf("earlier part before %d: %s %+v %v", before, resp.Status, ev.Off, err)
		}
		got = ev.Text + got
		before = int(ev.Off)
	}
	if got != all[:start] {
		t.Fatal("the earlier parts do not make up the log before the shown part")
	}
}

func TestWeb_RunnersTabShowsProcessOnlineAndHeldRuns(t *testing.T) {
	t.Parallel()
	f, _, id := strangerFixture(t)
	b := signedIn(t, f.URL, f.token)
	code, page := b.get("/alice/app/-/runners")
	if code != 200 {
		t.Fatalf("runners tab: %d", code)
	}
	row := page[strings.Index(page, `id="runner-r1"`):]
	row = row[:strings.Index(row, "</tr>")]
	for _, want := range []string{"online", `<td class="executor">none</td>`, `<td class="version">test</td>`, fmt.Sprintf(`href="/-/runs/%d"`, id)} {
		if !strings.Contains(row, want) {
			t.Errorf("runner r1's row lacks %q:\n%s", want, row)
		}
	}
	pending := page[strings.Index(page, `id="runner-pending1"`):]
	if !strings.Contains(pending[:strings.Index(pending, "</tr>")], "pending approval") {
		t.Errorf("pending1's row does not say it waits for approval")
	}
}

func TestWeb_OversizedFormRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	b := newBrowser(t, f.URL)
	body := "token=" + f.token + "&pad=" + strings.Repeat("x", 1<<20)
	resp, err := b.c.Post(f.URL+"/-/login", "application/x-www-form-urlencoded", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || len(resp.Cookies()) != 0 {
		t.Fatalf("a 1 MiB sign-in form: %s, cookies %v; want 400 and no session", resp.Status, resp.Cookies())
	}
}

// The database keeps hashes only, and a session's cookie is no API token.
func TestWeb_SessionStoresNoTokenOrCookieAndCookieIsNoAPIToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	b := signedIn(t, f.URL, f.token)
	u, _ := url.Parse(f.URL)
	var cookie string
	for _, c := range b.c.Jar.Cookies(u) {
		if c.Name == web.CookieName {
			cookie = c.Value
		}
	}
	if cookie == "" {
		t.Fatal("no session cookie")
	}
	db, err := os.ReadFile(filepath.Join(f.DataDir, server.DBFile))
	if err != nil {
		t.Fatal(err)
	}
	wal, _ := os.ReadFile(filepath.Join(f.DataDir, server.DBFile+"-wal"))
	for _, secret := range []string{f.token, cookie} {
		if strings.Contains(string(db)+string(wal), secret) {
			t.Errorf("the database holds %.8s... in plaintext", secret)
		}
	}
	var who api.Account
	err = f.Client(cookie).Query(context.Background(), api.MethodWhoAmI, nil, &who)
	if !api.IsError(err, api.ErrInvalidToken) {
		t.Fatalf("the session cookie as an API token: %v, want InvalidToken", err)
	}
}

// A push whose workflow files are all ignored is a pipeline of the web
// view's list, with no runs and the notes that say why (issue 39 §1).
func TestWeb_PipelineThatRanNothingIsListedWithItsNotes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	f.push(t, servertest.WorkTree(t, map[string]string{".knotless/workflows/ci.json": `{"steps": [{"run": "echo"}]}`}), "HEAD:refs/heads/main")
	alice := signedIn(t, f.URL, f.token)
	code, body := alice.get("/alice/app")
	if code != http.StatusOK || !strings.Contains(body, `id="p1"`) || !strings.Contains(body, "Ran nothing, because:") || !strings.Contains(body, "ci.json: not a workflow, not run: the file name ends in .json") {
		t.Errorf("GET /alice/app: %d, want pipeline 1 with its note:\n%s", code, body)
	}
}

// Another account gets 404 for a repository's Schedules tab and cannot
// pause its schedule through the web: the API's rule (owner or admin)
// holds on the web routes too. Pins: the tab or its Pause form reachable
// by anyone signed in.
func TestWeb_StrangerGets404ForSchedulesAndCannotPauseOne(t *testing.T) {
	t.Parallel()
	f, bob, _ := strangerFixture(t)
	f.push(t, servertest.WorkTree(t, map[string]string{".knotless/workflows/nightly.yml": nightly("")}), "+HEAD:refs/heads/main")
	sc := f.oneSchedule(t)
	if code, body := bob.get("/alice/app/-/schedules"); code != http.StatusNotFound || strings.Contains(body, "nightly") {
		t.Errorf("bob GET schedules: %d, want 404", code)
	}
	if code := bob.post("/alice/app/-/schedules/pause", url.Values{"csrf": {bob.csrf()}, "id": {fmt.Sprint(sc.ID)}, "paused": {"1"}}); code != http.StatusNotFound {
		t.Errorf("bob pauses: %d, want 404", code)
	}
	if sc = f.oneSchedule(t); sc.Paused {
		t.Fatalf("bob paused alice's schedule through the web")
	}
	alice := signedIn(t, f.URL, f.token)
	if code, body := alice.get("/alice/app/-/schedules"); code != http.StatusOK || !strings.Contains(body, "nightly") {
		t.Errorf("alice GET schedules: %d", code)
	}
}
