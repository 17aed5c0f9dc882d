package agent

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// ClientHandshake opens the protocol on rwc as the client: it sends
// Preamble and hello, reads the agent's Preamble and AgentHello, and
// returns the connection. ctx bounds the handshake only. On error rwc is
// closed. The error wraps ErrNotAgent when the other side is not an agent.
func ClientHandshake(ctx context.Context, rwc io.ReadWriteCloser, hello ClientHello, heartbeat, deadAfter time.Duration) (*Conn, AgentHello, error) {
	var ah AgentHello
	// The hello goes with the preamble, before the agent's arrives: one
	// round trip in all.
	send := func(fw *FrameWriter) error {
		if err := fw.WriteJSON(TypeHello, hello); err != nil {
			return fmt.Errorf("send hello: %w", err)
		}
		return nil
	}
	cn, err := handshake(ctx, rwc, heartbeat, deadAfter, send, func(fw *FrameWriter, fr *FrameReader) error {
		if err := readHello(fr, &ah); err != nil {
			return err
		}
		if ah.Error != "" || !slices.Contains(hello.Versions, ah.Version) {
			return fmt.Errorf("agent %s speaks none of protocol versions %v: %s", ah.Agent, hello.Versions, ah.Error)
		}
		return nil
	})
	return cn, ah, err
}

// AgentHandshake opens the protocol on rwc as the agent: it sends Preamble,
// reads the client's Preamble and ClientHello, picks the newest version
// both speak and answers with hello (Version filled in). The returned
// connection's frames follow the client's hello. On error rwc is closed.
func AgentHandshake(ctx context.Context, rwc io.ReadWriteCloser, hello func(ClientHello) AgentHello, heartbeat, deadAfter time.Duration) (*Conn, ClientHello, error) {
	var ch ClientHello
	cn, err := handshake(ctx, rwc, heartbeat, deadAfter, nil, func(fw *FrameWriter, fr *FrameReader) error {
		if err := readHello(fr, &ch); err != nil {
			return err
		}
		ah := hello(ch)
		ah.Version = 0
		for _, v := range ch.Versions {
			if v <= Version && v > ah.Version {
				ah.Version = v
			}
		}
		if ah.Version == 0 {
			ah.Error = fmt.Sprintf("this agent speaks protocol version %d; the client offered %v", Version, ch.Versions)
		}
		if err := fw.WriteJSON(TypeHello, ah); err != nil {
			return fmt.Errorf("send hello: %w", err)
		}
		if ah.Version == 0 {
			return fmt.Errorf("%s", ah.Error)
		}
		return nil
	})
	return cn, ch, err
}

// handshake sends the Preamble (and whatever send, when set, writes right
// after it), reads the other side's, and runs hellos (the rest of the Hello
// exchange), all bounded by ctx; on success it returns the connection, on
// error it closes rwc.
func handshake(ctx context.Context, rwc io.ReadWriteCloser, heartbeat, deadAfter time.Duration, send func(*FrameWriter) error, hellos func(*FrameWriter, *FrameReader) error) (*Conn, error) {
	stop := context.AfterFunc(ctx, func() { _ = rwc.Close() })
	fw := NewFrameWriter(rwc)
	fr := NewFrameReader(rwc)
	err := fw.WriteRaw(Preamble)
	if err != nil {
		err = fmt.Errorf("send preamble: %w", err)
	}
	if err == nil && send != nil {
		err = send(fw)
	}
	if err == nil {
		if err = fr.ReadPreamble(); err != nil {
			err = fmt.Errorf("read preamble: %w", err)
		}
	}
	if err == nil {
		err = hellos(fw, fr)
	}
	if !stop() {
		err = ctx.Err()
	}
	if err != nil {
		_ = rwc.Close()
		return nil, err
	}
	return newConn(rwc, fr, fw, heartbeat, deadAfter), nil
}

// readHello reads the Hello frame into v.
func readHello(fr *FrameReader, v any) error {
	t, p, err := fr.ReadFrame()
	if err != nil {
		return fmt.Errorf("read hello: %w", err)
	}
	if t != TypeHello {
		return fmt.Errorf("%w: first frame is %s, not hello", ErrCorrupt, t)
	}
	return Decode(t, p, v)
}
