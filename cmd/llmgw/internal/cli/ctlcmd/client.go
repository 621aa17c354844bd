package ctlcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/llmgw/llmgw/controllerapi"
)

// client calls the controller's HTTP API.
type client struct {
	base  *url.URL
	token string
	http  *http.Client
}

func newClient(addr, token string, hc *http.Client) (*client, error) {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &Error{Code: ExitUsage, Msg: fmt.Sprintf("controller address %q is not an http:// or https:// URL", addr),
			Hint: "set --addr or " + EnvAddr + " to the controller's API, such as " + DefaultAddr}
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return &client{base: u, token: token, http: hc}, nil
}

// get reads path and decodes it into out (when not nil); it returns the
// raw body for -o json.
func (c *client) get(ctx context.Context, path string, q url.Values, out any) ([]byte, error) {
	return c.do(ctx, http.MethodGet, path, q, nil, out)
}

// do sends one request; body, when not nil, is sent as JSON. A response
// of 400 or above is an *Error with the API's message and hint.
func (c *client) do(ctx context.Context, method, path string, q url.Values, body, out any) ([]byte, error) {
	u, err := url.Parse(c.base.String() + escapePath(path))
	if err != nil {
		return nil, &Error{Code: ExitUsage, Msg: err.Error()}
	}
	u.RawQuery = q.Encode()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, &Error{Code: ExitUsage, Msg: err.Error()}
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return nil, err
		}
		return nil, &Error{Code: ExitUnreachable, Msg: fmt.Sprintf("cannot reach the controller at %s: %v", c.base, unwrapURLError(err)),
			Hint: "is it running? set --addr or " + EnvAddr + " to its API address (listen in llmgw.hcl)"}
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, &Error{Code: ExitUnreachable, Msg: fmt.Sprintf("%s %s: read answer: %v", method, path, err)}
	}
	if resp.StatusCode >= 400 {
		return nil, apiError(method, path, resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return nil, &Error{Code: ExitError, Msg: fmt.Sprintf("%s %s: cannot read the answer: %v", method, path, err),
				Hint: "is " + c.base.String() + " an llmgw controller of the same version as this llmgw?"}
		}
	}
	return raw, nil
}

// escapePath escapes each segment of path, keeping its slashes.
func escapePath(path string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// apiError turns an error response into an *Error with the exit status for
// its class and the API's hint, or one of ours where the API has none.
func apiError(method, path string, status int, raw []byte) error {
	var ae controllerapi.APIError
	if err := json.Unmarshal(raw, &ae); err != nil || ae.Error == "" {
		ae = controllerapi.APIError{Error: fmt.Sprintf("%s %s: %d %s: %s", method, path, status, http.StatusText(status),
			strings.TrimSpace(string(raw)))}
	}
	e := &Error{Code: ExitError, Msg: ae.Error, Hint: ae.Hint}
	switch {
	case status == http.StatusUnauthorized:
		e.Code = ExitUnauthorized
		e.Hint = "set --token or " + EnvToken + " to the controller's api_token"
	case status == http.StatusForbidden:
		// A controller without api_token refusing a write: its hint says
		// what to set on the controller, not here.
		e.Code = ExitUnauthorized
		if e.Hint == "" {
			e.Hint = "set --token or " + EnvToken + " to the controller's api_token"
		}
	case status == http.StatusNotFound:
		e.Code = ExitNotFound
	case status == http.StatusTooManyRequests:
		// Busy (another plan under way): the request was fine.
		e.Code = ExitError
	case status >= 400 && status < 500:
		e.Code = ExitUsage
	}
	return e
}
