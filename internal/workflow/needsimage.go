package workflow

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// An image may name a value a needed run exported (`needs:`), as
// `{{ needs.NAME.VAR }}`: the image a run built and pushed, by digest, is
// the image a later run runs in (`image: registry.example.com/app@{{
// needs.image.DIGEST }}`, docs/container-builds.md). The decoder keeps the
// reference, spaces dropped, as `{{needs.NAME.VAR}}`; the runner, which
// receives the needed runs' exports with the claim, puts the value in
// (ResolveNeedsRefs) before the environment is made.

// needsRef is one `{{ needs.NAME.VAR }}`; the submatch is NAME.VAR.
var needsRef = regexp.MustCompile(`\{\{\s*needs\.([^{}\s]*)\s*\}\}`)

// needsUse is one reference of an image, checked against `needs:` once
// the whole workflow is read (checkNeedsRefs).
type needsUse struct {
	name, ref, what string
	at              pos
}

// HasNeedsRef reports whether s (an image) uses a `{{ needs.NAME.VAR }}`
// value.
func HasNeedsRef(s string) bool { return needsRef.MatchString(s) }

// splitNeedsRef splits NAME.VAR at its last dot (VAR is a variable name,
// without dots; NAME is a workflow's name, which may have some).
func splitNeedsRef(s string) (name, variable string, ok bool) {
	i := strings.LastIndexByte(s, '.')
	if i <= 0 || i == len(s)-1 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// imageText reads an image (`image:` of the workflow or of a service):
// one word of text, `{{ needs.NAME.VAR }}` references allowed and kept as
// `{{needs.NAME.VAR}}`. A reference with no valid NAME.VAR is an error
// here; one whose NAME is not in `needs:` is one of checkNeedsRefs.
func (d *decoder) imageText(e entry, what string) (string, bool) {
	s, ok := d.text(e, what)
	if !ok {
		return "", false
	}
	bad := false
	s = needsRef.ReplaceAllStringFunc(s, func(ref string) string {
		inner := needsRef.FindStringSubmatch(ref)[1]
		name, variable, ok := splitNeedsRef(inner)
		switch {
		case !ok:
			d.errorf(e.vpos(), "%s: %s names no value; write {{ needs.NAME.VAR }}, NAME an entry of needs: and VAR a name its run exported", what, ref)
			bad = true
		case !ValidEnvName(variable):
			d.errorf(e.vpos(), "%s: %s: %q is not a name a run can export (letters, digits and _, not starting with a digit)", what, ref, variable)
			bad = true
		default:
			d.needsUses = append(d.needsUses, needsUse{name: name, ref: ref, what: what, at: e.vpos()})
		}
		return "{{needs." + inner + "}}"
	})
	if bad {
		return "", false
	}
	if strings.IndexFunc(s, unicode.IsSpace) >= 0 {
		d.errorf(e.vpos(), "%s %q contains white space", what, s)
		return "", false
	}
	return s, true
}

// checkNeedsRefs reports each image reference whose NAME is no entry of
// needs.
func (d *decoder) checkNeedsRefs(needs []Need) {
	for _, u := range d.needsUses {
		if !slices.ContainsFunc(needs, func(n Need) bool { return n.Name == u.name }) {
			d.errorf(u.at, "%s uses %s, but needs: does not name %s (add needs: [%s]: a value comes from a run this one waits for)", u.what, u.ref, u.name, u.name)
		}
	}
}

// NeedsExports are the values the runs a run needs exported, by the
// entry of `needs:` naming them: one map per run (a needed matrix has
// several).
type NeedsExports map[string][]map[string]string

// ResolveNeedsRefs puts the values of exports into s, a run's image with
// `{{needs.NAME.VAR}}` references as the decoder keeps them. Errors, each
// naming the reference: NAME with no run (knotless-run exec runs none),
// NAME with more than one (a matrix: which would it be?), VAR not
// exported by it, or a result that is not one word. s without a reference
// ("" included: no image) is returned as it is.
func ResolveNeedsRefs(s string, exports NeedsExports) (string, error) {
	if !HasNeedsRef(s) {
		return s, nil
	}
	var err error
	out := needsRef.ReplaceAllStringFunc(s, func(ref string) string {
		if err != nil {
			return ""
		}
		name, variable, _ := splitNeedsRef(needsRef.FindStringSubmatch(ref)[1])
		runs := exports[name]
		switch {
		case len(runs) == 0:
			err = fmt.Errorf("%s: this run has no run of %s to take the value from (knotless-run exec runs no needs)", ref, name)
			return ""
		case len(runs) > 1:
			err = fmt.Errorf("%s: %s ran %d times (a matrix), each with its own %s; an image can take the value of one run only", ref, name, len(runs), variable)
			return ""
		}
		v, ok := runs[0][variable]
		if !ok {
			have := slices.Sorted(maps.Keys(runs[0]))
			list := "none"
			if len(have) > 0 {
				list = strings.Join(have, ", ")
			}
			err = fmt.Errorf("%s: the run of %s exported no %s (it exported: %s; a step writes %s=VALUE to $KNOTLESS_EXPORT)", ref, name, variable, list, variable)
			return ""
		}
		return v
	})
	if err != nil {
		return "", err
	}
	if out == "" || strings.IndexFunc(out, unicode.IsSpace) >= 0 {
		return "", fmt.Errorf("%s: with the needed runs' values it is %q, which is not an image (one word)", s, out)
	}
	return out, nil
}
