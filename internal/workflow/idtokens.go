package workflow

import (
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode"

	"github.com/goccy/go-yaml/ast"
)

// IDToken is one entry of the workflow's `id-tokens:`, after GitLab CI's
// id_tokens: an OpenID Connect token the server signs for each step that
// lists its name, given to the step as a variable of that name.
type IDToken struct {
	// Audience is `aud:` ("aud" of the token): one value or several. Empty
	// means the issuer's own URL (the server's --url).
	Audience []string
	// Lifetime is `lifetime:`; DefaultIDTokenLifetime when omitted, at
	// least MinIDTokenLifetime, at most the run's timeout and
	// MaxIDTokenLifetime.
	Lifetime time.Duration
}

// Bounds of an id token's lifetime.
const (
	DefaultIDTokenLifetime = 10 * time.Minute
	MinIDTokenLifetime     = time.Minute
	// MaxIDTokenLifetime is the server's bound too (oidc.MaxLifetime): a
	// retired signing key stays published that long.
	MaxIDTokenLifetime = 24 * time.Hour
	// maxAudience bounds one audience's length in bytes.
	maxAudience = 512
)

var idTokenKeys = []string{"aud", "lifetime"}

// idTokenDef is a decoded `id-tokens:` entry and where it was written.
type idTokenDef struct {
	tok         IDToken
	at          pos // the name
	lifetimeAt  *pos
	setLifetime bool
}

// idTokens reads the workflow's `id-tokens:` mapping.
func (d *decoder) idTokens(e entry) map[string]idTokenDef {
	if isNull(e.val) {
		return nil
	}
	es, ok := d.entries(e.val, e.vpos(), "id-tokens")
	if !ok {
		return nil
	}
	out := map[string]idTokenDef{}
	for _, x := range es {
		switch {
		case !ValidEnvName(x.key):
			d.errorf(x.kpos, "id token name %q is not a valid variable name (the step gets the token as a variable of that name); use letters, digits and _, not starting with a digit", x.key)
			continue
		case reservedEnv(x.key):
			d.errorf(x.kpos, "id token name %s is reserved: knotless sets it for every step", x.key)
			continue
		}
		def := idTokenDef{tok: IDToken{Lifetime: DefaultIDTokenLifetime}, at: x.kpos}
		for _, y := range d.section(x, "id token "+x.key, idTokenKeys) {
			switch y.key {
			case "aud":
				def.tok.Audience = d.audience(y, "id token "+x.key+" aud")
			case "lifetime":
				if t, ok := d.duration(y, "id token "+x.key+" lifetime"); ok {
					p := y.vpos()
					def.tok.Lifetime, def.lifetimeAt, def.setLifetime = t, &p, true
				}
			}
		}
		out[x.key] = def
	}
	return out
}

// audience reads `aud:`: a string or a list of strings, each a StringOrURI
// (RFC 7519 §2): no white space, and a URI when it holds a colon.
func (d *decoder) audience(e entry, what string) []string {
	var items []item
	switch e.val.(type) {
	case *ast.SequenceNode:
		items, _ = d.strList(e.val, e.vpos(), what, "[https://kube.example]")
		if len(items) == 0 {
			d.errorf(e.vpos(), "%s is empty; name the relying party (e.g. aud: https://kube.example), or remove aud: for the server's URL", what)
		}
	default:
		s, ok := d.str(e.val, e.vpos(), what)
		if !ok {
			return nil
		}
		items = []item{{s: s, p: e.vpos()}}
	}
	var out []string
	for _, it := range d.unique(items, what) {
		if err := checkAudience(it.s); err != nil {
			d.errorf(it.p, "%s: %v", what, err)
			continue
		}
		out = append(out, it.s)
	}
	return out
}

// checkAudience accepts one audience value.
func checkAudience(s string) error {
	switch {
	case strings.TrimSpace(s) == "":
		return fmt.Errorf("an audience is empty; name the relying party, e.g. https://kube.example")
	case len(s) > maxAudience:
		return fmt.Errorf("an audience is longer than %d bytes", maxAudience)
	case strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return fmt.Errorf("audience %q contains white space", s)
	case strings.Contains(s, ":"):
		if u, err := url.Parse(s); err != nil || u.Scheme == "" || (u.Opaque == "" && u.Host == "" && u.Path == "") {
			return fmt.Errorf("audience %q holds a colon but is no URI (RFC 7519 StringOrURI); write a URI such as https://kube.example, or a name without a colon", s)
		}
	}
	return nil
}

// checkIDTokens checks what depends on the rest of the workflow: each
// lifetime against the run's timeout, and names that are also secrets or
// env variables.
func (d *decoder) checkIDTokens(defs map[string]idTokenDef, timeout time.Duration, secrets map[string]bool, env map[string]pos) {
	for name, def := range defs {
		if def.setLifetime {
			switch t := def.tok.Lifetime; {
			case t < MinIDTokenLifetime:
				d.errorf(*def.lifetimeAt, "id token %s lifetime %s is shorter than %s", name, t, MinIDTokenLifetime)
			case t > MaxIDTokenLifetime:
				d.errorf(*def.lifetimeAt, "id token %s lifetime %s is longer than %s, the most a token may live", name, t, MaxIDTokenLifetime)
			case t > timeout:
				d.errorf(*def.lifetimeAt, "id token %s lifetime %s is longer than the run's timeout of %s; a token lives at most as long as its run (raise timeout: or shorten lifetime:)", name, t, timeout)
			}
		}
		if secrets[name] {
			d.errorf(def.at, "%s is both an id token and a secret of the workflow; rename one", name)
		}
		if _, clash := env[name]; clash {
			d.errorf(def.at, "%s is both an id token and an env variable of the workflow; rename one", name)
		}
	}
}

// stepIDTokens reads a step's `id-tokens:` list: names defined in the
// workflow's `id-tokens:`.
func (d *decoder) stepIDTokens(e entry, where string, defined map[string]idTokenDef) []string {
	if isNull(e.val) {
		return nil
	}
	items, _ := d.strList(e.val, e.vpos(), where+" id-tokens", "[DEPLOY_TOKEN]")
	var out []string
	for _, it := range d.unique(items, where+" id-tokens") {
		if _, ok := defined[it.s]; !ok {
			d.errorf(it.p, "id token %s is not defined in the workflow's id-tokens; add it there (id-tokens: {%s: {aud: https://kube.example}})", it.s, it.s)
			continue
		}
		out = append(out, it.s)
	}
	return out
}

// IDTokenNames returns the names of the id tokens any step asks for.
func (w *Workflow) IDTokenNames() []string {
	seen := map[string]bool{}
	var out []string
	for _, st := range w.Steps {
		for _, n := range st.IDTokens {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	return out
}
