package gateway

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// CORS is the gateway's own policy: engines' Access-Control-* headers
// never reach the client (finish drops them), and only the origins the
// operator lists (Options.CORSOrigins, --cors-origins) may use the
// gateway from a browser. By default none may: a request carrying an
// Origin header is refused with 403, preflight included. Browsers send
// Origin on every cross-origin request and on same-origin POSTs; the
// gateway serves no page of its own, so any Origin is a page elsewhere,
// and a keyless gateway must not be usable from a visitor's browser.
// API clients (SDKs, curl, servers) send none and are not concerned.

// CORSMaxAge is how long a browser may keep a preflight's answer.
const CORSMaxAge = 10 * time.Minute

// corsExposed are the answer's headers a page may read besides the
// CORS-safelisted ones.
var corsExposed = "Retry-After, " + ReplicaHeader + ", " + RouteHeader

// corsPolicy is the set of allowed origins.
type corsPolicy struct {
	any     bool // "*": every origin
	origins map[string]bool
}

// newCORSPolicy returns the policy allowing origins: "*" for every one,
// else each scheme://host[:port] (gateway/config.CheckOrigins checks
// them), compared without case and a trailing slash.
func newCORSPolicy(origins []string) corsPolicy {
	p := corsPolicy{origins: map[string]bool{}}
	for _, o := range origins {
		if o == "*" {
			p.any = true
			continue
		}
		p.origins[normOrigin(o)] = true
	}
	return p
}

func normOrigin(o string) string {
	return strings.ToLower(strings.TrimSuffix(strings.TrimSpace(o), "/"))
}

func (p corsPolicy) allowed(origin string) bool {
	return p.any || p.origins[normOrigin(origin)]
}

// wrap applies the policy in front of h. A request without an Origin
// header (every API client's) costs one header lookup.
func (p corsPolicy) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		vals, ok := r.Header["Origin"]
		if !ok {
			h.ServeHTTP(w, r)
			return
		}
		preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
		if len(vals) != 1 || !p.allowed(vals[0]) {
			origin := strings.Join(vals, ", ")
			writeError(w, http.StatusForbidden, "invalid_request_error", "origin_not_allowed", "",
				fmt.Sprintf("Requests from web pages of origin %q are not allowed: the gateway's CORS policy allows the origins of its setting cors_origins only (none by default).", origin))
			return
		}
		hd := w.Header()
		hd.Add("Vary", "Origin")
		if p.any {
			hd.Set("Access-Control-Allow-Origin", "*")
		} else {
			hd.Set("Access-Control-Allow-Origin", vals[0])
		}
		if !preflight {
			hd.Set("Access-Control-Expose-Headers", corsExposed)
			h.ServeHTTP(w, r)
			return
		}
		// The preflight: the methods the routes take, and the headers
		// the page asked for (an allowed origin may send any: an
		// Authorization with its key, an SDK's own headers).
		hd.Set("Access-Control-Allow-Methods", "GET, POST")
		if req := r.Header.Values("Access-Control-Request-Headers"); len(req) > 0 && headerList(req) {
			hd.Set("Access-Control-Allow-Headers", strings.Join(req, ", "))
		}
		hd.Set("Access-Control-Max-Age", strconv.Itoa(int(CORSMaxAge.Seconds())))
		hd.Add("Vary", "Access-Control-Request-Method, Access-Control-Request-Headers")
		w.WriteHeader(http.StatusNoContent)
	})
}

// headerList reports whether vals are comma-separated header names
// (RFC 9110 tokens), so that reflecting them adds nothing else.
func headerList(vals []string) bool {
	for _, v := range vals {
		for f := range strings.SplitSeq(v, ",") {
			f = strings.TrimSpace(f)
			if f == "" {
				return false
			}
			for i := 0; i < len(f); i++ {
				if !tchar(f[i]) {
					return false
				}
			}
		}
	}
	return true
}

// tchar reports whether c may be in a token (RFC 9110 §5.6.2).
func tchar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
