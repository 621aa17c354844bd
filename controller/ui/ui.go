// Package ui is the controller's web console: static HTML, CSS and plain
// JavaScript, embedded in the binary and served at /ui/ by the
// controller's API handler. There is no build step: the files under
// static/ are what the browser gets.
//
// The page reads and writes the controller's own JSON API (../v1/…). When
// the controller has an api_token, every API call needs it (reads too):
// the operator types it into the page, which keeps it in the browser tab's
// sessionStorage and sends it as a bearer token (Authorization header,
// never a cookie, so another site cannot make the browser send it). The
// files themselves load without it. It has four views:
//
//   - Facility: rows and racks as a picture, each rack a bar of committed
//     and measured draw against its budget, held domains marked, the
//     replicas of a chosen model highlighted; hold or release a rack or a
//     row from the picture. Each budgeted domain says how it counts shards
//     (declared, or measured with what declared would be) and its GPU power
//     caps (GET /v1/power: engaged on how many GPUs, its bound against its
//     limit, off, or refused); capped GPUs are marked on their nodes.
//   - Nodes: location, GPUs, power and holds of every node; set a node's
//     location labels, hold or release any domain.
//   - Replicas: every replica slot, each with its placement explanation.
//   - Models: every model's counts, signals and last decision, and for
//     each autoscaled model its demand and replica counts over the last
//     hour (the controller's in-memory history, GET
//     /v1/models/{model}/history), drawn as inline SVG.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Handler serves the console's files from its root: mount it under a
// prefix with http.StripPrefix.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree always has static/
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// The files change with the binary: revalidate, never serve stale.
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		h.Set("Referrer-Policy", "no-referrer")
		files.ServeHTTP(w, r)
	})
}
