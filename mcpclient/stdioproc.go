package mcpclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
)

// stdioProc is a stdio server subprocess whose output reaches mcp-go's line framing through
// lineLimiter: a line longer than the size cap ends the connection before it is decoded, so
// reading it never costs more than the cap.
type stdioProc struct {
	*transport.Stdio
	cmd *exec.Cmd
	lim *lineLimiter
}

// startStdio starts command with its stdin and stdout as the transport's pipe (stderr is
// discarded, as mcp-go does); the process ends with life at the latest, as mcp-go's did.
func startStdio(life context.Context, opts Options) (*stdioProc, error) {
	cmd := exec.CommandContext(life, opts.Command, opts.Args...) //nolint:gosec // the command is the operator's configured server
	cmd.Env = append(os.Environ(), opts.Env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lim := &lineLimiter{r: stdout, max: opts.Limits.withDefaults().MaxMessage}
	tr := transport.NewIO(lim, stdin, nil)
	return &stdioProc{Stdio: tr, cmd: cmd, lim: lim}, nil
}

// Close ends the pipe, then the process: it has two seconds to exit on its own.
func (p *stdioProc) Close() error {
	err := p.Stdio.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	return err
}

// overLimit wraps err when the connection ended on a line over the size cap.
func (p *stdioProc) overLimit(err error) error {
	if !p.lim.over.Load() {
		return err
	}
	return fmt.Errorf("%w: a line over %d bytes from the server ended the connection: %w", ErrResultTooLarge, p.lim.max, err)
}

// lineLimiter passes a stream of lines through, failing the read of a line longer than max.
type lineLimiter struct {
	r    io.Reader
	max  int
	run  int // bytes since the last newline
	over atomic.Bool
}

var errLineTooLong = errors.New("line over the size limit")

// Read implements io.Reader.
func (l *lineLimiter) Read(p []byte) (int, error) {
	if l.over.Load() {
		return 0, errLineTooLong
	}
	n, err := l.r.Read(p)
	chunk := p[:n]
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			l.run += len(chunk)
			break
		}
		l.run += i
		if l.run > l.max {
			break
		}
		l.run = 0
		chunk = chunk[i+1:]
	}
	if l.run > l.max {
		l.over.Store(true)
		return 0, errLineTooLong
	}
	return n, err
}
