package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"knotless.dev/knotless/internal/testwait"
)

// Tests of the web pages run in a real headless Chromium (Debian's
// chromium package), driven with chromedp. Without Chromium they skip,
// unless KNOTLESS_TEST_BROWSER_REQUIRED=1 (make test sets it), which
// makes them fail.

// chromiumPath finds the browser or skips (fails when required).
func chromiumPath(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("KNOTLESS_TEST_BROWSER_REQUIRED") == "1" {
		t.Fatal("no chromium in PATH and KNOTLESS_TEST_BROWSER_REQUIRED=1: apt-get install -y chromium")
	}
	t.Skip("no chromium in PATH (apt-get install -y chromium); set KNOTLESS_TEST_BROWSER_REQUIRED=1 to fail instead")
	return ""
}

// newBrowser starts a headless Chromium with a fresh profile and returns
// the context of its first tab; it is stopped when the test ends.
func newBrowser(t testing.TB) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		// Without these Chromium dials out (and is refused) many times at once.
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // start the browser now
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// do runs actions with a deadline and fails the test on error.
func do(t testing.TB, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("browser: %s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t testing.TB, ctx context.Context, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("browser: evaluate %s: %v", expr, err)
	}
	return v
}

// tryEval is eval that returns the error instead (the page may be
// navigating).
func tryEval[T any](ctx context.Context, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr))
}

// signIn signs the browser in with an account token through the form.
func signIn(t testing.TB, ctx context.Context, base, token string) {
	t.Helper()
	do(t, ctx, "sign in",
		chromedp.Navigate(base+"/-/login"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("form.login button")),
		chromedp.WaitVisible(chromedp.CSS("form.signout")),
	)
}

// pageText waits until the page's text holds want (d at most).
func waitText(t testing.TB, ctx context.Context, d time.Duration, want string) {
	t.Helper()
	testwait.Until(t, d, fmt.Sprintf("the page to show %q", want), func() (bool, string) {
		text, err := tryEval[string](ctx, `document.body ? document.body.innerText : ""`)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(text, want), tail(text, 400)
	})
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// screenshotDir is where the tests write screenshots: $KNOTLESS_TEST_SCREENSHOTS,
// else the test's artifact directory (kept with go test -artifacts).
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("KNOTLESS_TEST_SCREENSHOTS")
	if dir == "" {
		dir = t.ArtifactDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// maxCaptureHeight is the tallest page screenshots captures whole, in CSS
// pixels. Chromium refuses a full-page capture of a much taller page ("Page
// is too large": a finished run's page with a 60,000-line log is ~800,000
// px tall), so such a page is captured as the window shows it from its
// top, as a person opening it sees it.
const maxCaptureHeight = 16384

// screenshots saves the page at desktop (1280 px) and phone (390 px) width
// as NAME-desktop.png and NAME-phone.png: the whole page, or for a page
// taller than maxCaptureHeight the window at the page's top.
func screenshots(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := screenshotDir(t)
	for _, v := range []struct {
		suffix string
		w, h   int64
		opts   []chromedp.EmulateViewportOption
	}{
		{"desktop", 1280, 900, nil},
		{"phone", 390, 844, []chromedp.EmulateViewportOption{chromedp.EmulateMobile, chromedp.EmulateTouch}},
	} {
		do(t, ctx, "resize for "+v.suffix, chromedp.EmulateViewport(v.w, v.h, v.opts...))
		capture := chromedp.FullScreenshot(100)
		if tall := eval[float64](t, ctx, `document.documentElement.scrollHeight`); tall > maxCaptureHeight {
			eval[bool](t, ctx, `window.scrollTo(0, 0), true`)
			capture = chromedp.CaptureScreenshot()
			t.Logf("%s-%s: the page is %.0f px tall: captured the window at its top", name, v.suffix, tall)
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		png, err := chromedp.Run(sctx, capture)
		cancel()
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		p := filepath.Join(dir, name+"-"+v.suffix+".png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", p)
		// A phone-width page must not need sideways scrolling.
		if v.suffix == "phone" {
			if wide := eval[bool](t, ctx, `document.documentElement.scrollWidth > window.innerWidth + 1`); wide {
				t.Errorf("%s is wider than a phone's screen (%d px)", name, v.w)
			}
		}
	}
	do(t, ctx, "reset viewport", chromedp.EmulateReset())
}
