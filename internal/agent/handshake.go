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
	stop := context.AfterFunc(ctx, func() { _ = rwc.Close() })
	fw := NewFrameWriter(rwc)
	fr := NewFrameReader(rwc)
	var ah AgentHello
	err := func() error {
		if err := fw.WriteRaw(Preamble); err != nil {
			return fmt.Errorf("send preamble: %w", err)
		}
		if err := fw.WriteJSON(TypeHello, hello); err != nil {
			return fmt.Errorf("send hello: %w", err)
		}
		if err := fr.ReadPreamble(); err != nil {
			return fmt.Errorf("read preamble: %w", err)
		}
		t, p, err := fr.ReadFrame()
		if err != nil {
			return fmt.Errorf("read hello: %w", err)
		}
		if t != TypeHello {
			return fmt.Errorf("%w: first frame is %s, not hello", ErrCorrupt, t)
		}
		if err := Decode(t, p, &ah); err != nil {
			return err
		}
		if ah.Error != "" || !slices.Contains(hello.Versions, ah.Version) {
			return fmt.Errorf("agent %s speaks none of protocol versions %v: %s", ah.Agent, hello.Versions, ah.Error)
		}
		return nil
	}()
	if !stop() {
		err = ctx.Err()
	}
	if err != nil {
		_ = rwc.Close()
		return nil, ah, err
	}
	return newConn(rwc, fr, fw, heartbeat, deadAfter), ah, nil
}

// AgentHandshake opens the protocol on rwc as the agent: it sends Preamble,
// reads the client's Preamble and ClientHello, picks the newest version
// both speak and answers with hello (Version filled in). The returned
// connection's frames follow the client's hello. On error rwc is closed.
func AgentHandshake(ctx context.Context, rwc io.ReadWriteCloser, hello func(ClientHello) AgentHello, heartbeat, deadAfter time.Duration) (*Conn, ClientHello, error) {
	stop := context.AfterFunc(ctx, func() { _ = rwc.Close() })
	fw := NewFrameWriter(rwc)
	fr := NewFrameReader(rwc)
	var ch ClientHello
	err := func() error {
		if err := fw.WriteRaw(Preamble); err != nil {
			return fmt.Errorf("send preamble: %w", err)
		}
		if err := fr.ReadPreamble(); err != nil {
			return fmt.Errorf("read preamble: %w", err)
		}
		t, p, err := fr.ReadFrame()
		if err != nil {
			return fmt.Errorf("read hello: %w", err)
		}
		if t != TypeHello {
			return fmt.Errorf("%w: first frame is %s, not hello", ErrCorrupt, t)
		}
		if err := Decode(t, p, &ch); err != nil {
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
	}()
	if !stop() {
		err = ctx.Err()
	}
	if err != nil {
		_ = rwc.Close()
		return nil, ch, err
	}
	return newConn(rwc, fr, fw, heartbeat, deadAfter), ch, nil
}
