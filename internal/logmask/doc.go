// Package logmask hides secret values in a stream of log bytes before any
// byte leaves the runner. A Writer replaces every occurrence of each
// secret value, of its base64 encodings (also as they appear inside a
// longer base64 text), and of each line of a multi-line secret, with
// "***"; a value split across Write calls is still caught.
//
// It never emits a byte that might still turn out to belong to a secret:
// it holds back only the shortest tail of the stream that is the start of
// some masked form, so live logs stay live. It never logs, stores or
// returns the secret values it was given, and values shorter than
// MinSecretLen bytes (see TooShort) are not masked at all: callers must
// warn about them instead.
package logmask
