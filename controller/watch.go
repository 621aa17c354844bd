package controller

import (
	"context"
	"log/slog"
	"time"

	"github.com/hashicorp/nomad/api"
)

// watchWait is how long one blocking query may wait on the servers.
const watchWait = 5 * time.Minute

// watchDeadline bounds one blocking query on this side: the servers answer
// within watchWait plus their jitter (up to 1/16 of it), so a query still
// open past this hangs on a dead connection (a server that restarted, a
// cut network) and is abandoned.
const watchDeadline = watchWait + watchWait/16 + 30*time.Second

// watchMaxBackoff is the longest wait between failed queries: a restarted
// server is read again within it.
const watchMaxBackoff = 10 * time.Second

// watch runs a blocking query until ctx ends: it calls fetch with the last
// index seen, and onChange with every result whose index moved. Errors back
// off from 1s to watchMaxBackoff; each query has watchDeadline. It never polls at a fixed rate: an idle cluster costs
// one open request per watched list.
func watch[T any](ctx context.Context, log *slog.Logger, what string,
	fetch func(q *api.QueryOptions) (T, *api.QueryMeta, error), onChange func(T, uint64)) {
	var index uint64
	backoff := time.Second
	for ctx.Err() == nil {
		qctx, cancel := context.WithTimeout(ctx, watchDeadline)
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: watchWait}).WithContext(qctx)
		v, meta, err := fetch(q)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("nomad watch failed; retrying", "watch", what, "error", err, "in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, watchMaxBackoff)
			continue
		}
		backoff = time.Second
		if meta.LastIndex < index {
			// The servers' index went backwards (a snapshot restore): start over.
			index = 0
			continue
		}
		if meta.LastIndex != index || index == 0 {
			onChange(v, meta.LastIndex)
		}
		index = max(meta.LastIndex, 1)
	}
}
