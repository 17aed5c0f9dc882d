package api

import (
	"strings"
	"testing"
)

func TestCheckServerURL(t *testing.T) {
	for _, tc := range []struct{ in, errHas string }{
		{"http://127.0.0.1:8080", ""},
		{"https://ci.example.com", ""},
		{"https://ci.example.com/knotless", ""},
		{"127.0.0.1:8080", "did you mean http://127.0.0.1:8080?"},
		{"localhost:8080", "did you mean http://localhost:8080?"},
		{"ci.example.com", "did you mean https://ci.example.com?"},
		{"http:ci.example.com", "not complete"},
		{"ftp://ci.example.com", "not ftp://"},
		{"http://", "has no host"},
		{"https://admin:secret@ci.example.com", "must not hold a user name"},
	} {
		err := CheckServerURL(tc.in)
		switch {
		case tc.errHas == "" && err != nil:
			t.Errorf("CheckServerURL(%q) = %v, want nil", tc.in, err)
		case tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)):
			t.Errorf("CheckServerURL(%q) = %v, want an error containing %q", tc.in, err, tc.errHas)
		}
	}
}
