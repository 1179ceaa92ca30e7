package receiver

import (
	"net"
	"net/http"
	"net/url"
	"strings"
)

// loopbackHosts are the host names allowed when Config.AllowedHosts is empty.
var loopbackHosts = []string{"localhost", "127.0.0.1", "::1"}

// hostAllowed reports whether a host name (no port) is on the allow-list.
// Comparison is case-insensitive; a trailing dot is ignored.
func hostAllowed(allowed []string, host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" {
		return false
	}
	for _, a := range allowed {
		if strings.TrimSuffix(strings.ToLower(a), ".") == host {
			return true
		}
	}
	return false
}

// splitHost drops the port of a Host header value and the brackets of an
// IPv6 literal.
func splitHost(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

// checkOrigin is the DNS-rebinding guard: the Host header, and the Origin
// header when a browser sends one, must name an allowed host. It returns
// the reason for a refusal, or "".
func checkOrigin(allowed []string, req *http.Request) string {
	if !hostAllowed(allowed, splitHost(req.Host)) {
		return "Host is not allowed"
	}
	origin := req.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || !hostAllowed(allowed, u.Hostname()) {
		return "Origin is not allowed"
	}
	return ""
}

// guardOrigin answers 403 to requests whose Host or Origin is not allowed.
func (r *Receiver) guardOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if reason := checkOrigin(r.cfg.AllowedHosts, req); reason != "" {
			r.log.Warn("request refused by the DNS-rebinding guard", "reason", reason)
			writeJSON(w, http.StatusForbidden, response(nil, nil, errf(CodeInvalidRequest, "Forbidden: %s", reason)))
			return
		}
		next.ServeHTTP(w, req)
	})
}
