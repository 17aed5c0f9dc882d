package logmask

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
)

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("logmask: write after close")

// chunk bounds how much input is scanned before decided bytes are moved
// to the output buffer, which keeps the list of masked spans short.
const chunk = 64 << 10

// Writer masks secrets in everything written to it and passes the result
// to the underlying writer.
//
// Every byte that is part of any occurrence of any masked form (see New)
// is hidden, and each maximal run of hidden bytes becomes one "***". So
// overlapping or adjacent occurrences never leave part of a secret
// visible, and the output does not depend on how the input was split
// into Write calls.
//
// A Writer is safe for concurrent use; its input is the bytes in the
// order the Write calls were serialised.
type Writer struct {
	mu     sync.Mutex
	out    io.Writer
	ac     *automaton // nil when there is nothing to mask
	err    error      // sticky: the first error of out, or ErrClosed
	closed bool

	state      int32   // automaton state after the last byte read
	pos        int64   // stream offset just after the last byte read
	emitted    int64   // stream offset of the first byte not yet emitted
	held       []byte  // bytes [emitted, pos), not yet decided
	spare      []byte  // a second buffer for held, swapped each Write
	spans      []span  // hidden spans within [emitted, pos), merged, sorted
	prevHidden bool    // the last emitted byte was hidden
	obuf       []byte  // output being assembled for one Write
	src        srcView // where bytes [emitted, pos) are during a Write
}

// span is a half-open range [a, e) of stream offsets to hide.
type span struct{ a, e int64 }

// srcView finds stream bytes in held (from heldAt) followed by the
// current input p (from pAt).
type srcView struct {
	held   []byte
	heldAt int64
	p      []byte
	pAt    int64
}

// New returns a Writer that writes to out with every occurrence of each
// secret value masked, and of each of its forms the package documentation
// lists: without trailing line breaks, each line of it, and its base64,
// percent-encoded, shell-quoted and JSON-escaped forms.
//
// Values and forms shorter than MinSecretLen bytes, and blank values, are
// not masked (see TooShort). The secrets slice is not kept.
func New(out io.Writer, secrets []string) *Writer {
	w := &Writer{out: out}
	if pats := patterns(secrets); len(pats) > 0 {
		w.ac = newAutomaton(pats)
	}
	return w
}

// NewResumed is New for a stream that continues where another Writer with
// the same secrets left off at one of its checkpoints (see Checkpoint):
// given the checkpoint's lastHidden, its output continues that Writer's
// output exactly as if one Writer had masked the whole stream.
func NewResumed(out io.Writer, secrets []string, lastHidden bool) *Writer {
	w := New(out, secrets)
	w.prevHidden = lastHidden
	return w
}

// Checkpoint reports how many input bytes the Writer has decided and
// passed on so far (n), and whether the last of them was hidden. ok is
// false when the state cannot be resumed from here: a masked span
// continues past the decided bytes. A Writer made with NewResumed(...,
// lastHidden) and fed the input from byte n on writes what this Writer
// would have written from then on.
func (w *Writer) Checkpoint() (n int64, lastHidden, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ac == nil {
		return w.pos, false, true
	}
	return w.emitted, w.prevHidden, len(w.spans) == 0
}

// Write masks p and writes to the underlying writer everything that can
// no longer be part of a secret: all but the shortest tail of the stream
// that is the start of a masked form. It returns len(p) when the
// underlying writer accepted the output (whose length may differ from
// len(p)); after the underlying writer fails once, every Write returns 0
// and that error.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return 0, w.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if w.ac == nil {
		n, err := w.writeOut(p, len(p))
		if err == nil {
			w.pos += int64(len(p))
			w.emitted = w.pos
		}
		return n, err
	}
	w.obuf = w.obuf[:0]
	w.src = srcView{held: w.held, heldAt: w.emitted, p: p, pAt: w.pos}
	// direct: nothing was held and nothing is masked so far, so the
	// decided bytes are a prefix of p and can be passed on uncopied.
	direct := len(w.held) == 0 && len(w.spans) == 0
	for off := 0; off < len(p); off += chunk {
		w.scan(p[off:min(off+chunk, len(p))])
		if direct && len(w.spans) == 0 {
			continue
		}
		direct = false
		w.emit(w.frontier())
	}
	if direct {
		n := int(w.frontier() - w.src.pAt)
		w.emitted += int64(n)
		if n > 0 {
			w.prevHidden = false
		}
		w.keepHeld()
		return w.writeOut(p[:n], len(p))
	}
	w.keepHeld()
	return w.writeOut(w.obuf, len(p))
}

// frontier is the stream offset before which every byte is decided: the
// bytes after it are the longest tail that some pattern could continue.
func (w *Writer) frontier() int64 {
	return w.pos - int64(w.ac.nodes[w.state].hold)
}

// scan runs the automaton over b, recording the spans to hide.
func (w *Writer) scan(b []byte) {
	a := w.ac
	s := w.state
	base := w.pos
	for i := 0; i < len(b); i++ {
		if s == 0 {
			// Fast path: skip bytes that start no pattern.
			for i < len(b) && a.root[b[i]] == 0 {
				i++
			}
			if i == len(b) {
				break
			}
		}
		s = a.step(s, b[i])
		if o := a.nodes[s].out; o != 0 {
			end := base + int64(i) + 1
			w.addSpan(span{end - int64(o), end})
		}
	}
	w.state = s
	w.pos = base + int64(len(b))
}

// addSpan merges sp into the sorted spans; sp ends at or after every
// span found before, but may start before several of them.
func (w *Writer) addSpan(sp span) {
	for n := len(w.spans); n > 0 && sp.a <= w.spans[n-1].e; n = len(w.spans) {
		sp.a = min(sp.a, w.spans[n-1].a)
		sp.e = max(sp.e, w.spans[n-1].e)
		w.spans = w.spans[:n-1]
	}
	w.spans = append(w.spans, sp)
}

// emit appends the decided stream bytes [emitted, upTo) to obuf: visible
// bytes as they are, each run of hidden bytes as one Replacement.
func (w *Writer) emit(upTo int64) {
	for w.emitted < upTo {
		if len(w.spans) > 0 && w.spans[0].a <= w.emitted {
			if !w.prevHidden {
				w.obuf = append(w.obuf, Replacement...)
				w.prevHidden = true
			}
			end := min(w.spans[0].e, upTo)
			w.emitted = end
			if end == w.spans[0].e {
				w.spans = w.spans[1:]
			}
			continue
		}
		next := upTo
		if len(w.spans) > 0 && w.spans[0].a < upTo {
			next = w.spans[0].a
		}
		w.obuf = w.src.appendRange(w.obuf, w.emitted, next)
		w.prevHidden = false
		w.emitted = next
	}
	if len(w.spans) == 0 && cap(w.spans) > 1024 {
		w.spans = nil // let a long list's memory go
	}
}

func (v *srcView) appendRange(dst []byte, from, to int64) []byte {
	pEnd := v.pAt + int64(len(v.p))
	if from < v.pAt {
		dst = append(dst, v.held[from-v.heldAt:min(to, v.pAt)-v.heldAt]...)
	}
	if to > v.pAt && from < pEnd {
		dst = append(dst, v.p[max(from, v.pAt)-v.pAt:to-v.pAt]...)
	}
	return dst
}

// keepHeld copies the undecided bytes [emitted, pos) out of the caller's
// buffer before Write returns.
func (w *Writer) keepHeld() {
	nb := w.src.appendRange(w.spare[:0], w.emitted, w.pos)
	w.spare, w.held = w.held[:0], nb
	w.src = srcView{}
}

func (w *Writer) writeOut(b []byte, n int) (int, error) {
	if len(b) == 0 {
		return n, nil
	}
	if _, err := w.out.Write(b); err != nil {
		w.err = fmt.Errorf("logmask: write masked log: %w", err)
		return 0, w.err
	}
	return n, nil
}

// Flush writes out the held-back tail as if the stream ended here: a
// secret split across a Flush is not recognised, so call it only at a
// boundary (the end of a step), not on a timer.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flush()
}

func (w *Writer) flush() error {
	if w.err != nil {
		return w.err
	}
	if w.ac == nil || len(w.held) == 0 {
		w.state = 0
		return nil
	}
	w.obuf = w.obuf[:0]
	w.src = srcView{held: w.held, heldAt: w.emitted, pAt: w.pos}
	w.emit(w.pos)
	w.keepHeld()
	w.state = 0
	_, err := w.writeOut(w.obuf, 0)
	return err
}

// Close flushes the held-back tail. It does not close the underlying
// writer. Later Writes fail with ErrClosed; Close may be called again.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		if errors.Is(w.err, ErrClosed) {
			return nil
		}
		return w.err
	}
	w.closed = true
	err := w.flush()
	if w.err == nil {
		w.err = ErrClosed
	}
	return err
}

// String returns s with the secrets masked as a Writer would mask it.
// Use it for text that leaves the runner outside the log stream, such as
// error messages.
func String(s string, secrets []string) string {
	var b bytes.Buffer
	w := New(&b, secrets)
	w.Write([]byte(s)) //nolint:errcheck // bytes.Buffer does not fail
	w.Close()          //nolint:errcheck
	return b.String()
}
