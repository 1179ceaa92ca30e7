package receiver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// ErrDropped is returned by ServeStdio when a fault knob dropped the connection.
var ErrDropped = errors.New("connection dropped by a fault knob")

// stdioWriter writes newline-delimited JSON-RPC messages.
type stdioWriter struct {
	mu     sync.Mutex
	w      io.Writer
	closed chan struct{}
	once   sync.Once
}

func (s *stdioWriter) send(msg any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.closed:
		return errStreamClosed
	default:
	}
	if _, err := s.w.Write(append(b, '\n')); err != nil {
		s.once.Do(func() { close(s.closed) })
		return fmt.Errorf("write message: %w", err)
	}
	return nil
}

func (s *stdioWriter) done() <-chan struct{} { return s.closed }

func (s *stdioWriter) close() { s.once.Do(func() { close(s.closed) }) }

// ServeStdio serves MCP over a stdio-style stream pair: newline-delimited
// JSON-RPC messages read from r and written to w. One connection serves both
// eras: after initialize it speaks 2025-11-25 (tasks/result, elicitation
// requests and status notifications on w); a request carrying the
// 2026-07-28 _meta is served statelessly by the extension. It returns nil
// when r ends or ctx is done, ErrDropped when a fault knob dropped the
// connection, or the read error.
func (r *Receiver) ServeStdio(ctx context.Context, rd io.Reader, w io.Writer) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(r.ctx, func() { cancel(nil) })
	defer stop()
	out := &stdioWriter{w: w, closed: make(chan struct{})}
	defer out.close()
	sess := r.newSession(anonymous, out)
	defer r.endSession(sess)
	var initialized bool
	var initMu sync.Mutex
	var wg sync.WaitGroup
	defer func() {
		cancel(nil)
		wg.Wait()
	}()

	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(rd)
		sc.Buffer(make([]byte, 64<<10), maxBody)
		for sc.Scan() {
			b := append([]byte(nil), sc.Bytes()...)
			select {
			case lines <- b:
			case <-ctx.Done():
				return
			}
		}
		readErr <- sc.Err()
	}()

	write := func(m *message, rep reply) {
		if rep.dropBefore {
			r.stats.add(func(c *Counters) { c.Dropped++ })
			cancel(ErrDropped)
			return
		}
		msg := response(m.ID, rep.result, rep.err)
		if rep.err == nil && rep.result == nil {
			msg = response(m.ID, obj{}, nil)
		}
		if rep.httpStatus != 0 {
			msg = response(m.ID, nil, errf(CodeInternalError, "Internal error: tasks/get temporarily unavailable"))
		}
		_ = out.send(msg)
		if rep.dropAfter {
			r.stats.add(func(c *Counters) { c.Dropped++ })
			cancel(ErrDropped)
		}
	}

	handle := func(m *message) {
		p, _ := decodeParams(m.Params)
		modern := m.Method == "server/discover" || str(sub(p, "_meta"), MetaProtocolVersion) != ""
		if m.Method == "initialize" {
			modern = false
		}
		_, _, delayAll := r.knobs.flags()
		if modern {
			if !r.cfg.Eras.extension() {
				write(m, fail(errf(CodeMethodNotFound, "Method not found: %s", m.Method)))
				return
			}
			if v := str(sub(p, "_meta"), MetaProtocolVersion); m.Method != "server/discover" && v != VersionExtension {
				write(m, fail(r.versionError(v)))
				return
			}
			r.stats.add(func(c *Counters) { c.Methods[m.Method]++ })
			rc := &reqCtx{ctx: ctx, ident: anonymous, modern: readModernMeta(p), stream: func() outbound { return out }}
			rep := r.modernDispatch(rc, m)
			rep.delay += delayAll
			_ = sleep(ctx, rep.delay)
			write(m, rep)
			return
		}
		if !r.cfg.Eras.legacy() {
			write(m, fail(r.versionError(str(p, "protocolVersion"))))
			return
		}
		r.stats.add(func(c *Counters) { c.Methods[m.Method]++ })
		initMu.Lock()
		if m.Method == "initialize" {
			initialized = true
			initMu.Unlock()
			sess.declareCapabilities(p)
			write(m, ok(r.initializeResult()))
			return
		}
		ready := initialized
		initMu.Unlock()
		if !ready && m.Method != "ping" {
			write(m, fail(errf(CodeInvalidRequest, "Invalid Request: not initialized")))
			return
		}
		rc := &reqCtx{ctx: ctx, ident: anonymous, sess: sess, stream: func() outbound { return out }}
		rep := r.legacyDispatch(rc, m)
		rep.delay += delayAll
		_ = sleep(ctx, rep.delay)
		if ctx.Err() != nil {
			return
		}
		write(m, rep)
	}

	for {
		select {
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), ErrDropped) {
				return ErrDropped
			}
			return nil
		case err := <-readErr:
			if err != nil {
				return fmt.Errorf("read stdio: %w", err)
			}
			return nil
		case line := <-lines:
			if len(line) == 0 {
				continue
			}
			m, rerr := decodeMessage(line)
			if rerr != nil {
				var id json.RawMessage
				if m != nil && m.hasID() {
					id = m.ID
				}
				_ = out.send(response(id, nil, rerr))
				continue
			}
			switch {
			case m.isResponse():
				sess.deliverResponse(m)
			case m.isNotification():
			default:
				wg.Add(1)
				go func() {
					defer wg.Done()
					handle(m)
				}()
			}
		}
	}
}
