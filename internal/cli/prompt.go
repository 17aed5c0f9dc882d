package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/term"
)

// maxSecretBytes bounds a secret or token read from stdin or a file.
const maxSecretBytes = 1 << 20

// terminalFd returns stdin's file descriptor when it is a terminal.
func (s *session) terminalFd() (int, bool) {
	f, ok := s.app.Stdin.(*os.File)
	if !ok || f == nil {
		return 0, false
	}
	fd := int(f.Fd())
	return fd, term.IsTerminal(fd)
}

// readStdin reads all of stdin, refusing more than maxSecretBytes.
func (s *session) readStdin(what string) ([]byte, error) {
	if s.app.Stdin == nil {
		return nil, nil
	}
	data, err := io.ReadAll(io.LimitReader(s.app.Stdin, maxSecretBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s from stdin: %w", what, err)
	}
	if len(data) > maxSecretBytes {
		return nil, failf("%s on stdin is larger than %d bytes", what, maxSecretBytes)
	}
	return data, nil
}

// promptHidden prints prompt on stderr and reads one line from the terminal
// fd without echo.
func (s *session) promptHidden(fd int, prompt string) ([]byte, error) {
	fmt.Fprint(s.stderr(), prompt)
	b, err := term.ReadPassword(fd)
	fmt.Fprintln(s.stderr())
	if err != nil {
		return nil, fmt.Errorf("read from terminal: %w", err)
	}
	return b, nil
}

// readSecretValue reads a secret's value: from stdin when it is not a
// terminal (one trailing "\n" removed, nothing else), else from a no-echo
// prompt asked twice. An empty value is refused.
func (s *session) readSecretValue(name string) ([]byte, error) {
	if fd, ok := s.terminalFd(); ok {
		v, err := s.promptHidden(fd, fmt.Sprintf("Value of secret %s: ", name))
		if err != nil {
			return nil, err
		}
		if len(v) == 0 {
			return nil, failf("empty value: secret %s not set", name)
		}
		again, err := s.promptHidden(fd, "Again, to confirm: ")
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(v, again) {
			return nil, failf("the two values differ: secret %s not set", name)
		}
		return v, nil
	}
	v, err := s.readStdin("secret value")
	if err != nil {
		return nil, err
	}
	v = bytes.TrimSuffix(v, []byte("\n"))
	if len(v) == 0 {
		return nil, failf("empty value on stdin: secret %s not set (pipe the value in, e.g. knotless secret set %s --repo R < file)", name, name)
	}
	return v, nil
}

// readToken reads an API token: from file when set, else stdin when it is
// not a terminal, else a no-echo prompt. Surrounding white space is removed.
func (s *session) readToken(file string) (string, error) {
	var data []byte
	switch fd, tty := s.terminalFd(); {
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", failf("read token: %v", err)
		}
		data = b
	case !tty:
		b, err := s.readStdin("token")
		if err != nil {
			return "", err
		}
		data = b
	default:
		b, err := s.promptHidden(fd, "API token: ")
		if err != nil {
			return "", err
		}
		data = b
	}
	tok := string(bytes.TrimSpace(data))
	if tok == "" {
		return "", &exitError{code: ExitUsage, msg: "no token given: use --token-file FILE, pipe it on stdin, or run in a terminal to be asked", err: errors.New("empty token")}
	}
	return tok, nil
}
