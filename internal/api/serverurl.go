package api

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// CheckServerURL accepts what a client may use as Client.BaseURL: an
// absolute http:// or https:// URL with a host and no user information.
// Its error is one sentence a person can act on, with a guess at what was
// meant: "server URL must start with http:// or https:// — did you mean
// http://127.0.0.1:8080?". The CLI and knotless-run check --server with it.
func CheckServerURL(raw string) error {
	const want = "want one like https://ci.example.com or http://127.0.0.1:8080"
	l := strings.ToLower(raw)
	if (strings.HasPrefix(l, "http:") || strings.HasPrefix(l, "https:")) && !strings.Contains(l, "://") {
		return fmt.Errorf("server URL %q is not complete: %s", raw, want)
	}
	if !strings.Contains(raw, "://") {
		return fmt.Errorf("server URL must start with http:// or https:// — did you mean %s?", guessScheme(raw))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("server URL %q cannot be read (%v): %s", raw, err, want)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("server URL must start with http:// or https://, not %s://", u.Scheme)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("server URL %q has no host: %s", raw, want)
	}
	if u.User != nil {
		return fmt.Errorf("server URL must not hold a user name or password: the token is kept apart")
	}
	return nil
}

// guessScheme puts a scheme before an address typed without one: http://
// for localhost and IP addresses (test and LAN servers), https:// for
// anything else.
func guessScheme(addr string) string {
	host := addr
	if i := strings.IndexAny(host, "/?#"); i >= 0 {
		host = host[:i]
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" || net.ParseIP(host) != nil {
		return "http://" + addr
	}
	return "https://" + addr
}
