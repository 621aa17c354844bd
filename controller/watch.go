package controller

import (
	"context"
	"log/slog"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/internal/blockingquery"
)

// watchWait is how long one blocking query may wait on the servers.
const watchWait = 5 * time.Minute

// watchMaxBackoff is the longest wait between failed queries: a restarted
// server is read again within it.
const watchMaxBackoff = 10 * time.Second

// watch runs a blocking query until ctx ends: it calls fetch with the last
// index seen, and onChange with every result whose index moved. Errors back
// off from 1s to watchMaxBackoff; each query has
// blockingquery.Deadline(watchWait). It never polls at a fixed rate: an
// idle cluster costs one open request per watched list.
func watch[T any](ctx context.Context, log *slog.Logger, what string,
	fetch func(q *api.QueryOptions) (T, *api.QueryMeta, error), onChange func(T, uint64)) {
	w := blockingquery.Watch[T]{
		Wait:     watchWait,
		Backoff:  blockingquery.Backoff{First: time.Second, Max: watchMaxBackoff},
		Fetch:    blockingquery.Nomad(fetch),
		OnAnswer: onChange,
		OnError: func(err error, retryIn time.Duration) {
			log.Warn("nomad watch failed; retrying", "watch", what, "error", err, "in", retryIn)
		},
	}
	w.Run(ctx)
}
