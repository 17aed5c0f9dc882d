//go:build linux

package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"knotless.dev/knotless/internal/syncbuf"
	"knotless.dev/knotless/internal/testenv"
	"knotless.dev/knotless/internal/testwait"
)

// openPTY opens a pseudo-terminal pair: the test types on the controller,
// the CLI reads the terminal.
func openPTY(t *testing.T) (controller, terminal *os.File) {
	t.Helper()
	c, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		testenv.Skipf(t, "no pseudo-terminals here: %v", err)
	}
	// Fd() would make the controller blocking and its read deadlines void.
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		if ierr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ierr == nil {
			n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
		}
	}); err != nil || ierr != nil {
		t.Fatalf("set up pty: %v %v", err, ierr)
	}
	term, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	t.Cleanup(func() { term.Close(); c.Close() })
	return c, term
}

// typeHidden waits until the CLI printed its prompt number k on stderr and
// turned the terminal's echo off (it is reading a hidden value), then types
// line.
func typeHidden(t *testing.T, controller, terminal *os.File, stderr *syncbuf.Buffer, k int, line string) {
	t.Helper()
	testwait.For(t, 10*time.Second, fmt.Sprintf("prompt %d with echo off", k), func() bool {
		if strings.Count(stderr.String(), ": ") < k {
			return false
		}
		tio, err := unix.IoctlGetTermios(int(terminal.Fd()), unix.TCGETS)
		return err == nil && tio.Lflag&unix.ECHO == 0
	})
	if _, err := controller.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
}

// drain reads what the terminal echoed back to the controller so far.
func drain(controller *os.File) string {
	controller.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	var b bytes.Buffer
	buf := make([]byte, 4096)
	for {
		n, err := controller.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

func TestSecretSet_TerminalPromptsTwiceWithoutEcho(t *testing.T) {
	_, e := serverEnv(t)
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	const value = "typed-secret-Value"
	for _, c := range []struct {
		name          string
		first, second string
		want          int
	}{
		{"match", value, value, ExitOK},
		{"mismatch", value, value + "x", ExitFailed},
	} {
		t.Run(c.name, func(t *testing.T) {
			controller, terminal := openPTY(t)
			var out, errb syncbuf.Buffer
			code := make(chan int, 1)
			go func() {
				a := &App{Stdin: terminal, Stdout: &out, Stderr: &errb, Getenv: e.get}
				code <- a.Run(context.Background(), []string{"secret", "set", "TYPED", "--repo", "admin/app"})
			}()
			typeHidden(t, controller, terminal, &errb, 1, c.first)
			typeHidden(t, controller, terminal, &errb, 2, c.second)
			if got := testwait.Receive(t, code, 30*time.Second, "the CLI to exit"); got != c.want {
				t.Fatalf("exit %d, want %d; stderr %q", got, c.want, errb.String())
			}
			if echoed := drain(controller); strings.Contains(echoed, value) {
				t.Errorf("the terminal echoed the value: %q", echoed)
			}
			if strings.Count(errb.String(), ": ") < 2 || strings.Contains(out.String()+errb.String(), value) {
				t.Errorf("prompts or output wrong: stdout %q stderr %q", out.String(), errb.String())
			}
		})
	}
	r := mustRun(t, e, ExitOK, nil, "secret", "list", "--repo", "admin/app", "--json")
	if !strings.Contains(r.stdout, `"TYPED"`) {
		t.Errorf("typed secret not listed: %s", r.stdout)
	}
}

func TestLogin_TerminalPromptsForTokenWithoutEcho(t *testing.T) {
	srv, _ := serverEnv(t)
	e := isolatedEnv(t)
	controller, terminal := openPTY(t)
	var out, errb syncbuf.Buffer
	code := make(chan int, 1)
	go func() {
		a := &App{Stdin: terminal, Stdout: &out, Stderr: &errb, Getenv: e.get}
		code <- a.Run(context.Background(), []string{"login", "--server", srv.URL})
	}()
	typeHidden(t, controller, terminal, &errb, 1, srv.AdminToken)
	if got := testwait.Receive(t, code, 30*time.Second, "the CLI to exit"); got != ExitOK {
		t.Fatalf("exit %d; stderr %q", got, errb.String())
	}
	if echoed := drain(controller); strings.Contains(echoed, srv.AdminToken) {
		t.Errorf("the terminal echoed the token: %q", echoed)
	}
	if !strings.Contains(errb.String(), "API token: ") {
		t.Errorf("no prompt on stderr: %q", errb.String())
	}
}

// The no-echo assertions above mean something only if drain sees echo.
func TestPTYHelper_DrainSeesEchoWhenEchoIsOn(t *testing.T) {
	controller, _ := openPTY(t)
	if _, err := controller.Write([]byte("visible\n")); err != nil {
		t.Fatal(err)
	}
	if got := drain(controller); !strings.Contains(got, "visible") {
		t.Fatalf("drain read %q, want the echo", got)
	}
}
