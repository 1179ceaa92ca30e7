package mcpclient

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
)

// Custom parameter headers (SEP-2243): a tool marks an input property with
// "x-mcp-header": NAME, and every tools/call mirrors that argument into the
// HTTP header Mcp-Param-NAME. Values are sent as they are when they are
// printable ASCII without leading or trailing whitespace, and as
// =?base64?…?= (UTF-8) otherwise; integers and booleans in their JSON
// spelling; a null or absent argument sends no header.

const paramHeaderPrefix = "Mcp-Param-"

// DroppedTool is a tool left out of Tools because its definition is
// unusable, with the reason.
type DroppedTool struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// ToolDropper is implemented by connections that leave out tools with an
// invalid definition (an invalid x-mcp-header); DroppedTools says which and why.
type ToolDropper interface {
	DroppedTools() []DroppedTool
}

// headerToken reports whether s is a valid HTTP header-name token.
func headerToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// toolParamHeaders reads the x-mcp-header annotations of a tool's input
// schema: argument name → header name. An invalid annotation is an error
// naming what is wrong; the tool must then not be used.
func toolParamHeaders(schema json.RawMessage) (map[string]string, error) {
	if len(bytes.TrimSpace(schema)) == 0 || !bytes.Contains(schema, []byte("x-mcp-header")) {
		return nil, nil
	}
	var s struct {
		Properties map[string]map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, nil // not an object schema with properties: nothing to mirror
	}
	out := map[string]string{}
	seen := map[string]string{}
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, prop := range names {
		raw, marked := s.Properties[prop]["x-mcp-header"]
		if !marked {
			continue
		}
		var h string
		if err := json.Unmarshal(raw, &h); err != nil {
			return nil, fmt.Errorf("property %q: x-mcp-header is not a string", truncate(prop, 64))
		}
		if h == "" {
			return nil, fmt.Errorf("property %q: x-mcp-header is empty", truncate(prop, 64))
		}
		if !headerToken(h) {
			return nil, fmt.Errorf("property %q: x-mcp-header %q is not a valid header name (ASCII token characters only)", truncate(prop, 64), truncate(SanitizeMessage(h, 64), 64))
		}
		var typ string
		_ = json.Unmarshal(s.Properties[prop]["type"], &typ)
		switch typ {
		case "string", "integer", "boolean":
		default:
			return nil, fmt.Errorf("property %q: x-mcp-header on a %q property (only string, integer and boolean may be mirrored)", truncate(prop, 64), truncate(typ, 32))
		}
		if other, dup := seen[strings.ToLower(h)]; dup {
			return nil, fmt.Errorf("x-mcp-header %q names both %q and %q", h, truncate(other, 64), truncate(prop, 64))
		}
		seen[strings.ToLower(h)] = prop
		out[prop] = h
	}
	return out, nil
}

// dropInvalidTools removes tools whose x-mcp-header annotations are invalid.
func dropInvalidTools(tools []Tool) ([]Tool, []DroppedTool) {
	kept := tools[:0:0]
	var dropped []DroppedTool
	for _, t := range tools {
		if _, err := toolParamHeaders(t.InputSchema); err != nil {
			dropped = append(dropped, DroppedTool{Name: t.Name, Reason: "invalid x-mcp-header: " + err.Error()})
			continue
		}
		kept = append(kept, t)
	}
	return kept, dropped
}

// headerSafe reports whether a string may be sent as a header value as is.
func headerSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return s == strings.TrimSpace(s)
}

// paramHeaders computes the Mcp-Param-* headers of a call of tool with args.
func paramHeaders(tool Tool, args any) http.Header {
	marks, err := toolParamHeaders(tool.InputSchema)
	if err != nil || len(marks) == 0 {
		return nil
	}
	b, err := json.Marshal(argsOrEmpty(args))
	if err != nil {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var vals map[string]any
	if dec.Decode(&vals) != nil {
		return nil
	}
	h := http.Header{}
	for prop, name := range marks {
		var v string
		switch x := vals[prop].(type) {
		case string:
			v = x
			if !headerSafe(x) {
				v = "=?base64?" + base64.StdEncoding.EncodeToString([]byte(x)) + "?="
			}
		case json.Number:
			v = x.String()
		case bool:
			v = fmt.Sprint(x)
		default:
			continue // null, absent, or not a primitive: no header
		}
		h.Set(paramHeaderPrefix+name, v)
	}
	return h
}

type paramHeadersKey struct{}

// withParamHeaders carries a call's Mcp-Param-* headers to the HTTP wire.
func withParamHeaders(ctx context.Context, h http.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return context.WithValue(ctx, paramHeadersKey{}, h)
}

// ctxParamHeaders returns the headers withParamHeaders attached, or nil.
func ctxParamHeaders(ctx context.Context) http.Header {
	h, _ := ctx.Value(paramHeadersKey{}).(http.Header)
	return h
}

// logDropped records each dropped tool in the log.
func logDropped(opts Options, dropped []DroppedTool) {
	for _, d := range dropped {
		opts.Logger.Warn("mcpclient: tool left out", "server", opts.serverKey(), "tool", SanitizeMessage(d.Name, 128), "reason", d.Reason)
	}
}
