package runner

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// decodeJSON reads a 2xx XRPC answer into out and closes its body.
func decodeJSON(resp *http.Response, out any) error {
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}
