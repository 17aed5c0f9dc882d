package cache

import (
	"encoding/hex"
	"strings"
)

// Object names in a shared bucket (see the package doc for why they are
// safe). Every name is made of:
//
//	v1/<ID(repo)>/<ID(paths)>/<spelled key prefix>~<ID(key)>.tzst   the entry
//	v1/<ID(repo)>/<ID(paths)>/<spelled key prefix>~<ID(key)>.used   its last use
//
// where the spelled key prefix is the hex of the key's first
// spelledKeyBytes bytes, cut into components of spellChunk characters.
const (
	namesVersion    = "v1/"
	spelledKeyBytes = 256
	spellChunk      = 128
	entrySuffix     = ".tzst"
	usedSuffix      = ".used"
)

// repoPrefix is where all of repo's objects are.
func repoPrefix(repo string) string { return namesVersion + ID(repo) + "/" }

// pathsPrefix is where repo's entries saved with exactly paths are.
func pathsPrefix(repo string, paths []string) string {
	return repoPrefix(repo) + ID(strings.Join(paths, "\x00")) + "/"
}

// spell is the hex of b with a "/" after every spellChunk characters. It
// spells byte by byte, so spell(p) is a prefix of spell(k) whenever p is a
// prefix of k (what listing by restore key needs), and it writes only
// [0-9a-f/]: a key cannot name "..", "/" or "%" of its own.
func spell(b string) string {
	h := hex.EncodeToString([]byte(b))
	var sb strings.Builder
	for i := 0; i < len(h); i += spellChunk {
		if i > 0 {
			sb.WriteByte('/')
		}
		sb.WriteString(h[i:min(i+spellChunk, len(h))])
	}
	return sb.String()
}

// entryName is the object of repo's entry for key with paths.
func entryName(repo string, paths []string, key string) string {
	return pathsPrefix(repo, paths) + spell(key[:min(len(key), spelledKeyBytes)]) + "~" + ID(key) + entrySuffix
}

// usedName is the last-use marker of the entry named name.
func usedName(entry string) string { return strings.TrimSuffix(entry, entrySuffix) + usedSuffix }

// restorePrefix is the name prefix of repo's entries with paths whose key
// may start with rk; exact says every name under it does (rk is at most
// spelledKeyBytes long), else the caller checks each key (Stat).
func restorePrefix(repo string, paths []string, rk string) (prefix string, exact bool) {
	if len(rk) > spelledKeyBytes {
		return pathsPrefix(repo, paths) + spell(rk[:spelledKeyBytes]), false
	}
	return pathsPrefix(repo, paths) + spell(rk), true
}

// spelledKey reads an entry's name below its paths prefix back: the key
// when it is whole in the name (shorter than spelledKeyBytes), and
// whether it is.
func spelledKey(rest string) (key string, whole bool, ok bool) {
	sp, id, found := strings.Cut(strings.TrimSuffix(rest, entrySuffix), "~")
	if !found || !strings.HasSuffix(rest, entrySuffix) {
		return "", false, false
	}
	b, err := hex.DecodeString(strings.ReplaceAll(sp, "/", ""))
	if err != nil || len(b) == 0 {
		return "", false, false
	}
	if len(b) < spelledKeyBytes {
		return string(b), true, ID(string(b)) == id
	}
	return string(b), false, true
}
