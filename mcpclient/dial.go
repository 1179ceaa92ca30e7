package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// discovered is a decoded server/discover result.
type discovered struct {
	versions []string
	rawCaps  json.RawMessage
	caps     Capabilities
	name     string
	version  string
}

// probeAnswer is what one modern probe concluded.
type probeAnswer struct {
	ev      Evidence
	modern  bool // the server speaks 2026-07-28
	disc    *discovered
	refusal *RPCError // the -32022 answer, sanitised, when there was one
}

// tasksEra is the Tasks era a modern answer implies: the extension only
// when a discover result advertised it without the legacy capabilities.tasks.
// A modern error without a result (-32022 for the only modern version this
// client speaks, -32021, -32020) leaves no usable extension: legacy is tried.
//
// A discover result whose supportedVersions lacks 2025-11-25 is a modern-only
// server: initialize would be refused, so the modern core is spoken at once
// (plain calls work; task creation is refused without the extension).
func (p probeAnswer) tasksEra() Era {
	if p.modern && p.disc != nil && (p.disc.caps.Extension || !slices.Contains(p.disc.versions, string(EraLegacy))) {
		return EraExtension
	}
	return EraLegacy
}

func discoverParams(opts Options) map[string]any {
	return map[string]any{"_meta": map[string]any{
		metaProtocolVersion:    string(EraExtension),
		metaClientCapabilities: map[string]any{},
		metaClientInfo:         map[string]any{"name": opts.ClientName, "version": opts.ClientVersion},
	}}
}

// interpretDiscover turns a server/discover answer into a probe conclusion.
func interpretDiscover(ev Evidence, m *wireMessage) (probeAnswer, error) {
	if m.Error != nil {
		ev.ErrorCode = m.Error.Code
		ev.Answer = fmt.Sprintf("error %d", m.Error.Code)
		switch m.Error.Code {
		case CodeUnsupportedVersion:
			var data struct {
				Supported []string `json:"supported"`
			}
			_ = json.Unmarshal(m.Error.Data, &data)
			ev.SupportedVersions = truncList(data.Supported)
			ev.ModernServer = true
			return probeAnswer{ev: ev, modern: true, refusal: sanitizeRPCError(m.Error, Limits{})}, nil
		case CodeMissingCapability, CodeHeaderMismatch:
			ev.ModernServer = true
			return probeAnswer{ev: ev, modern: true}, nil
		}
		return probeAnswer{ev: ev}, nil
	}
	type implementation struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	var res struct {
		SupportedVersions []string        `json:"supportedVersions"`
		Capabilities      json.RawMessage `json:"capabilities"`
		// The modern core carries the implementation in
		// _meta["io.modelcontextprotocol/serverInfo"]; a top-level
		// serverInfo (initialize's place) is read as a fallback.
		ServerInfo implementation             `json:"serverInfo"`
		Meta       map[string]json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(m.Result, &res); err != nil {
		ev.Answer = "undecodable discover result"
		return probeAnswer{ev: ev}, nil
	}
	var metaInfo implementation
	if raw, ok := res.Meta["io.modelcontextprotocol/serverInfo"]; ok && json.Unmarshal(raw, &metaInfo) == nil && metaInfo.Name != "" {
		res.ServerInfo = metaInfo
	}
	ev.SupportedVersions = truncList(res.SupportedVersions)
	if !slices.Contains(res.SupportedVersions, string(EraExtension)) {
		ev.Answer = "discover result without 2026-07-28"
		return probeAnswer{ev: ev}, nil
	}
	caps, err := decodeCapabilities(res.Capabilities, EraExtension)
	if err != nil {
		ev.Answer = "discover result with undecodable capabilities"
		return probeAnswer{ev: ev}, nil
	}
	ev.ModernServer = true
	d := &discovered{versions: res.SupportedVersions, rawCaps: res.Capabilities, caps: caps,
		name: SanitizeMessage(res.ServerInfo.Name, 256), version: SanitizeMessage(res.ServerInfo.Version, 128)}
	switch {
	case caps.Tasks:
		ev.Answer = "discover result advertising legacy capabilities.tasks: extension not supported"
	case caps.Extension:
		ev.Answer = "discover result with the tasks extension"
	default:
		ev.Answer = "discover result without the tasks extension"
	}
	return probeAnswer{ev: ev, modern: true, disc: d}, nil
}

func truncList(in []string) []string {
	if len(in) > 16 {
		in = in[:16]
	}
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = truncate(s, 32)
	}
	return out
}

// probeHTTP sends the modern request (server/discover) over HTTP: a result
// or a 400 with a modern error body means modern, anything else legacy.
// -32022 is retried once when the server supports 2026-07-28 after all.
func probeHTTP(ctx context.Context, h *httpRPC, opts Options) (probeAnswer, error) {
	p, err := probeHTTPOnce(ctx, h, opts)
	if err != nil || !p.refusedButSupported() {
		return p, err
	}
	p, err = probeHTTPOnce(ctx, h, opts)
	return retried(p), err
}

func probeHTTPOnce(ctx context.Context, h *httpRPC, opts Options) (probeAnswer, error) {
	ev := Evidence{Method: "server/discover", Sent: string(EraExtension), At: time.Now().UTC()}
	body, _ := encodeRequest("tg-discover", "server/discover", discoverParams(opts))
	hdr := http.Header{}
	hdr.Set(headerMcpMethod, "server/discover")
	hdr.Set(headerProtoVersion, string(EraExtension))
	rep, err := h.post(ctx, "tg-discover", body, hdr, nil)
	ev.HTTPStatus = rep.status
	if err != nil {
		// Only a failed transport (no HTTP answer, or a stream cut short) and
		// refused credentials stop detection; any other HTTP answer without a
		// modern error body (404, 405, 5xx, HTML…) means legacy.
		if rep.status == 0 || errors.Is(err, ErrNotDelivered) || errors.Is(err, ErrUnauthorized) ||
			(rep.status == http.StatusOK && errors.Is(err, ErrTransportLost)) {
			return probeAnswer{}, fmt.Errorf("detect era: %w", err)
		}
		ev.Answer = fmt.Sprintf("HTTP %d without a modern answer", rep.status)
		return probeAnswer{ev: ev}, nil
	}
	if rep.msg == nil {
		ev.Answer = fmt.Sprintf("HTTP %d without a body", rep.status)
		return probeAnswer{ev: ev}, nil
	}
	if rep.msg.Error != nil && rep.status != http.StatusBadRequest && rep.status != http.StatusOK {
		// Only a 400 (or an in-band 200) modern error body counts.
		ev.Answer = fmt.Sprintf("HTTP %d error %d", rep.status, rep.msg.Error.Code)
		ev.ErrorCode = rep.msg.Error.Code
		return probeAnswer{ev: ev}, nil
	}
	return interpretDiscover(ev, rep.msg)
}

// probeStdio sends server/discover on a started stdio transport: a result or
// -32022 means modern; any other error or a timeout means legacy. attempt
// numbers the probes on the transport: each carries its own request id,
// because mcp-go's stdio reader forgets an id's waiter only after handing it
// the answer, so a request sent at once with the same id can have its waiter
// forgotten instead and never see its answer.
func probeStdio(ctx context.Context, tr transport.Interface, timeout time.Duration, opts Options, attempt int) (probeAnswer, error) {
	ev := Evidence{Method: "server/discover", Sent: string(EraExtension), At: time.Now().UTC()}
	pctx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		pctx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()
	resp, err := tr.SendRequest(pctx, transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId(fmt.Sprintf("tg-discover-%d", attempt)),
		Method: "server/discover", Params: discoverParams(opts)})
	if err != nil {
		if ctx.Err() != nil {
			return probeAnswer{}, fmt.Errorf("detect era: %w", ctx.Err())
		}
		if errors.Is(err, transport.ErrTransportClosed) {
			return probeAnswer{}, fmt.Errorf("detect era: %w: %w", ErrTransportLost, err)
		}
		ev.Answer = "no answer: " + truncate(err.Error(), 128)
		return probeAnswer{ev: ev}, nil
	}
	m := &wireMessage{JSONRPC: "2.0", Result: resp.Result}
	if resp.Error != nil {
		m.Error = &RPCError{Code: resp.Error.Code, Message: resp.Error.Message}
		if resp.Error.Data != nil {
			m.Error.Data, _ = json.Marshal(resp.Error.Data)
		}
	}
	p, err := interpretDiscover(ev, m)
	if err != nil {
		return p, err
	}
	if p.modern && p.disc == nil && p.ev.ErrorCode != CodeUnsupportedVersion {
		// -32021/-32020 are not modern answers on stdio (no headers there).
		p.modern = false
		p.ev.ModernServer = false
	}
	return p, nil
}

// refusedButSupported is a -32022 answer to our 2026-07-28 request whose
// supported list names 2026-07-28: the request is retried as 2026-07-28
// once before any other conclusion.
func (p probeAnswer) refusedButSupported() bool {
	return p.refusal != nil && slices.Contains(p.ev.SupportedVersions, string(EraExtension))
}

// retried marks the evidence of a second probe after a -32022.
func retried(p probeAnswer) probeAnswer {
	p.ev.Answer += fmt.Sprintf(" (after a retry: the first -32022 named %s)", string(EraExtension))
	return p
}

// versionFallback decides what a stdio -32022 answer to server/discover
// leads to. The reference says to retry with a version from
// error.data.supported; this client speaks 2026-07-28 (the version it just
// sent, so a refusal means the server will not speak it with us) and
// 2025-11-25, which only initialize negotiates. So: 2025-11-25 among the
// supported versions → initialize (legacy), recorded in the evidence;
// neither → a typed *UnsupportedVersionError, before any initialize is sent.
func versionFallback(p *probeAnswer) error {
	p.modern = false
	if slices.Contains(p.ev.SupportedVersions, string(EraLegacy)) {
		p.ev.Answer = fmt.Sprintf("error %d: server supports %s; initialize with %s",
			CodeUnsupportedVersion, strings.Join(p.ev.SupportedVersions, ", "), EraLegacy)
		return nil
	}
	return fmt.Errorf("detect era: %w", versionRefusal(*p))
}

// versionRefusal is the typed error of a -32022 answer.
func versionRefusal(p probeAnswer) error {
	rpc := p.refusal
	if rpc == nil {
		rpc = &RPCError{Code: CodeUnsupportedVersion, Message: "server/discover refused " + string(EraExtension)}
	}
	return &UnsupportedVersionError{RPC: rpc, Supported: append([]string(nil), p.ev.SupportedVersions...)}
}

func dialHTTP(ctx context.Context, opts Options) (Conn, error) {
	h := &httpRPC{url: opts.URL, client: opts.HTTPClient, token: opts.Token, lim: opts.Limits}
	key := opts.serverKey()
	now := time.Now().UTC()

	if opts.Resume != nil {
		if opts.Era == EraChoiceExtension {
			return nil, fmt.Errorf("mcpclient: resume is a 2025-11-25 session feature, not available in the extension era")
		}
		ev := Evidence{Method: "resume", Sent: string(EraLegacy), Answer: "stored Mcp-Session-Id resumed", Era: EraLegacy, Forced: true, At: now}
		return dialLegacyHTTP(ctx, opts, ev)
	}
	switch opts.Era {
	case EraChoiceLegacy:
		return dialLegacyHTTP(ctx, opts, Evidence{Method: "initialize", Sent: string(EraLegacy), Answer: "era forced", Era: EraLegacy, Forced: true, At: now})
	case EraChoiceExtension:
		p, err := probeHTTP(ctx, h, opts)
		if err != nil {
			return nil, err
		}
		if p.refusal != nil {
			return nil, fmt.Errorf("mcpclient: era forced to extension: %w", versionRefusal(p))
		}
		if !p.modern || p.disc == nil {
			return nil, fmt.Errorf("mcpclient: era forced to extension: %w (%s)", ErrExtensionUnsupported, p.ev.Answer)
		}
		p.ev.Forced, p.ev.Era = true, EraExtension
		return newExtHTTP(ctx, opts, h, p)
	}
	if ev, ok := opts.Detector.Lookup(key); ok && ev.Era == EraLegacy {
		ev.Cached = true
		conn, err := dialLegacyHTTP(ctx, opts, ev)
		if err == nil || errIsTransport(err) || errors.Is(err, ErrUnauthorized) {
			return conn, err
		}
		// The cached conclusion no longer holds: detect again.
		opts.Detector.Forget(key)
	}
	p, err := probeHTTP(ctx, h, opts)
	if err != nil {
		return nil, err
	}
	if p.modern && p.disc == nil && p.refusal != nil {
		if err := versionFallback(&p); err != nil {
			return nil, fmt.Errorf("mcpclient: %w", err)
		}
	}
	era := p.tasksEra()
	p.ev.Era = era
	if era == EraExtension {
		opts.Detector.Record(key, p.ev)
		return newExtHTTP(ctx, opts, h, p)
	}
	conn, err := dialLegacyHTTP(ctx, opts, p.ev)
	if err != nil && p.modern && p.disc != nil && !errIsTransport(err) {
		// A modern server without the extension that refuses initialize:
		// speak the modern core, with task creation refused.
		p.ev.Era = EraExtension
		p.ev.Answer += "; initialize refused"
		opts.Detector.Record(key, p.ev)
		return newExtHTTP(ctx, opts, h, p)
	}
	if err == nil {
		opts.Detector.Record(key, p.ev)
	}
	return conn, err
}

func newExtHTTP(ctx context.Context, opts Options, h *httpRPC, p probeAnswer) (Conn, error) {
	w := &extHTTPWire{h: h}
	c := &extConn{opts: opts, wire: w}
	c.inputs.onInput = opts.OnInput
	w.onNotify = c.onNotify
	c.info = extInfo(p)
	if _, err := c.RefreshTools(ctx); err != nil {
		return nil, fmt.Errorf("mcpclient: %w", err)
	}
	return c, nil
}

func extInfo(p probeAnswer) ServerInfo {
	info := ServerInfo{Era: EraExtension, ProtocolVersion: string(EraExtension), Evidence: p.ev}
	if p.disc != nil {
		info.Name, info.Version = p.disc.name, p.disc.version
		info.RawCapabilities, info.Capabilities = p.disc.rawCaps, p.disc.caps
	}
	return info
}

// getStreamWait bounds how long Dial waits for the server to answer the
// standalone GET stream.
const getStreamWait = 5 * time.Second

func dialLegacyHTTP(ctx context.Context, opts Options, ev Evidence) (Conn, error) {
	resumed := ""
	if opts.Resume != nil {
		resumed = opts.Resume.SessionID
	}
	tr := newLegacyHTTP(&httpRPC{url: opts.URL, client: opts.HTTPClient, token: opts.Token, lim: opts.Limits, resume: true}, opts.KeepSessionOnClose, resumed)
	life, cancel := context.WithCancel(context.Background())
	var err error
	c := newLegacy(opts, tr, true, life, cancel)
	if opts.Resume != nil {
		err = c.resume(opts.Resume, ev)
	} else {
		err = c.handshake(ctx, ev)
	}
	if err == nil {
		// Open the standalone GET stream before the first request, and wait
		// until the server accepts or refuses it: a server request sent right
		// after the first call must find it open.
		c.wg.Add(1)
		go c.listen()
		select {
		case <-c.getSettled:
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(getStreamWait):
			c.opts.Logger.Info("mcpclient: GET event stream not answered yet, going on", "server", opts.URL)
		}
	}
	if err == nil {
		_, err = c.RefreshTools(ctx)
	}
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("mcpclient: %w", err)
	}
	return c, nil
}

func dialStdio(ctx context.Context, opts Options) (Conn, error) {
	life, cancel := context.WithCancel(context.Background())
	tr, err := startStdio(life, opts)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("mcpclient: start %s: %w", opts.Command, err)
	}
	if err := tr.Start(life); err != nil {
		cancel()
		_ = tr.Close()
		return nil, fmt.Errorf("mcpclient: start %s: %w", opts.Command, err)
	}
	fail := func(err error) (Conn, error) {
		cancel()
		_ = tr.Close()
		return nil, fmt.Errorf("mcpclient: %w", err)
	}
	key := opts.serverKey()
	now := time.Now().UTC()
	var p probeAnswer
	switch opts.Era {
	case EraChoiceLegacy:
		p = probeAnswer{ev: Evidence{Method: "initialize", Sent: string(EraLegacy), Answer: "era forced", Forced: true, At: now}}
	default:
		if ev, ok := opts.Detector.Lookup(key); ok && opts.Era == EraAuto && ev.Era == EraLegacy {
			ev.Cached = true
			p = probeAnswer{ev: ev}
			break
		}
		var err error
		p, err = probeStdio(ctx, tr, opts.DiscoverTimeout, opts, 1)
		if err != nil {
			return fail(err)
		}
		if p.refusedButSupported() {
			if p, err = probeStdio(ctx, tr, opts.DiscoverTimeout, opts, 2); err != nil {
				return fail(err)
			}
			p = retried(p)
		}
		if opts.Era == EraChoiceExtension && p.refusal != nil {
			return fail(fmt.Errorf("era forced to extension: %w", versionRefusal(p)))
		}
		if p.modern && p.disc == nil {
			if err := versionFallback(&p); err != nil {
				return fail(err)
			}
		}
	}
	era := p.tasksEra()
	if opts.Era == EraChoiceExtension {
		if era != EraExtension {
			return fail(fmt.Errorf("era forced to extension: %w (%s)", ErrExtensionUnsupported, p.ev.Answer))
		}
		p.ev.Forced = true
	}
	p.ev.Era = era
	if era == EraExtension {
		return dialStdioExtension(ctx, opts, tr, cancel, p, key)
	}
	c := newLegacy(opts, tr, false, life, cancel)
	if err := c.handshake(ctx, p.ev); err != nil {
		if p.modern && p.disc != nil && !errIsTransport(err) {
			// A modern server without the extension that refuses
			// initialize: speak the modern core, task creation refused.
			p.ev.Era = EraExtension
			p.ev.Answer += "; initialize refused"
			return dialStdioExtension(ctx, opts, tr, cancel, p, key)
		}
		_ = c.Close()
		return nil, fmt.Errorf("mcpclient: %w", err)
	}
	if _, err := c.RefreshTools(ctx); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("mcpclient: %w", err)
	}
	if opts.Era == EraAuto {
		opts.Detector.Record(key, c.info.Evidence)
	}
	return c, nil
}

// dialStdioExtension speaks 2026-07-28 on a started stdio transport.
func dialStdioExtension(ctx context.Context, opts Options, tr *stdioProc, cancel context.CancelFunc, p probeAnswer, key string) (Conn, error) {
	w := &extStdioWire{tr: tr, lim: opts.Limits}
	c := &extConn{opts: opts, wire: w, cancel: cancel}
	c.inputs.onInput = opts.OnInput
	c.info = extInfo(p)
	tr.SetNotificationHandler(func(n mcp.JSONRPCNotification) {
		raw, err := json.Marshal(n.Params)
		if err == nil {
			c.onNotify(&wireMessage{JSONRPC: "2.0", Method: n.Method, Params: raw})
		}
	})
	if _, err := c.RefreshTools(ctx); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("mcpclient: %w", err)
	}
	if opts.Era == EraAuto {
		opts.Detector.Record(key, p.ev)
	}
	return c, nil
}
