package runner

import (
	"net"
	"net/url"
	"strings"
)

// CheckServerURL accepts an absolute http(s) URL with a host, as --server
// takes it. Its error (matching ErrUsage) is one sentence a person can act
// on, with a guess at what was meant: "server URL must start with http://
// or https:// — did you mean http://127.0.0.1:8080?". The knotless CLI
// checks its --server the same way (internal/cli).
func CheckServerURL(raw string) error {
	l := strings.ToLower(raw)
	if (strings.HasPrefix(l, "http:") || strings.HasPrefix(l, "https:")) && !strings.Contains(l, "://") {
		return usagef("server URL %q is not complete: want one like https://ci.example.com or http://127.0.0.1:8080", raw)
	}
	if !strings.Contains(raw, "://") {
		return usagef("server URL must start with http:// or https:// — did you mean %s?", guessScheme(raw))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return usagef("server URL %q cannot be read (%v): want one like https://ci.example.com or http://127.0.0.1:8080", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return usagef("server URL must start with http:// or https://, not %s://", u.Scheme)
	}
	if u.Hostname() == "" {
		return usagef("server URL %q has no host: want one like https://ci.example.com or http://127.0.0.1:8080", raw)
	}
	if u.User != nil {
		return usagef("server URL must not hold a user name or password")
	}
	return nil
}

// guessScheme puts a scheme before an address typed without one: http://
// for localhost and IP addresses, https:// for anything else.
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
