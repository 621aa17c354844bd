package blockingquery

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/nomad/api"
)

// answer is one scripted reply of a fake server: an index, or a failure.
type answer struct {
	index uint64
	err   error
}

// scripted is a Fetch that replies with script in order and ends the
// watch once the script is spent; it records every query and when it was
// asked (in a synctest bubble, on the bubble's clock).
type scripted struct {
	script  []answer
	cancel  context.CancelFunc
	queries []Query
	at      []time.Time
}

func (s *scripted) fetch(ctx context.Context, q Query) (uint64, uint64, error) {
	s.queries = append(s.queries, q)
	s.at = append(s.at, time.Now())
	if len(s.script) == 0 {
		s.cancel()
		return 0, 0, ctx.Err()
	}
	a := s.script[0]
	s.script = s.script[1:]
	return a.index, a.index, a.err
}

func (s *scripted) indexes() []uint64 {
	var out []uint64
	for _, q := range s.queries {
		out = append(out, q.Index)
	}
	return out
}

// gaps is the time between one query and the next.
func (s *scripted) gaps() []time.Duration {
	var out []time.Duration
	for i := 1; i < len(s.at); i++ {
		out = append(out, s.at[i].Sub(s.at[i-1]))
	}
	return out
}

func answers(indexes ...uint64) []answer {
	var out []answer
	for _, i := range indexes {
		out = append(out, answer{index: i})
	}
	return out
}

// The index each query asks with follows the answers: one that did not
// move is not delivered and the next query waits MinGap; one that went
// backwards is dropped and the next query is a plain read, whose answer is
// delivered; an index of 0 is asked again as 1.
func TestIndexFollowsAnswersAndStartsOverWhenItGoesBack(t *testing.T) {
	for _, tc := range []struct {
		unchanged bool
		delivered []uint64
	}{
		{false, []uint64{5, 9, 3, 0, 2}},
		{true, []uint64{5, 5, 9, 3, 0, 2}},
	} {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			s := &scripted{cancel: cancel, script: answers(5, 5, 9, 3, 3, 0, 0, 2)}
			var got []uint64
			w := Watch[uint64]{Unchanged: tc.unchanged, Fetch: s.fetch, OnAnswer: func(v, index uint64) {
				if v != index {
					t.Errorf("delivered %d with index %d", v, index)
				}
				got = append(got, index)
			}}
			w.Run(ctx)
			if d := cmp.Diff([]uint64{0, 5, 5, 9, 0, 3, 0, 1, 2}, s.indexes()); d != "" {
				t.Errorf("Unchanged=%v: query indexes (-want +got):\n%s", tc.unchanged, d)
			}
			if d := cmp.Diff(tc.delivered, got); d != "" {
				t.Errorf("Unchanged=%v: delivered (-want +got):\n%s", tc.unchanged, d)
			}
			if d := cmp.Diff([]time.Duration{0, MinGap, 0, 0, 0, 0, 0, 0}, s.gaps()); d != "" {
				t.Errorf("Unchanged=%v: time between queries (-want +got):\n%s", tc.unchanged, d)
			}
		})
	}
}

// Failures back off from First, doubling to Max; a success starts over.
// Each failure is reported with the wait that follows it.
func TestBackoffGrowsToItsCapAndResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		fail := answer{err: errors.New("connection refused")}
		s := &scripted{cancel: cancel, script: []answer{fail, fail, fail, fail, fail, fail, {index: 7}, fail, {index: 8}}}
		var reported []time.Duration
		w := Watch[uint64]{
			Backoff:  Backoff{First: time.Second, Max: 10 * time.Second},
			Fetch:    s.fetch,
			OnAnswer: func(uint64, uint64) {},
			OnError: func(err error, retryIn time.Duration) {
				if !errors.Is(err, fail.err) {
					t.Errorf("OnError got %v", err)
				}
				reported = append(reported, retryIn)
			},
		}
		w.Run(ctx)
		want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second, time.Second}
		if d := cmp.Diff(want, reported); d != "" {
			t.Errorf("reported waits (-want +got):\n%s", d)
		}
		// The waits, then the answer 7 asked again at once, 8 after a second.
		if d := cmp.Diff(append(want[:6:6], 0, time.Second, 0), s.gaps()); d != "" {
			t.Errorf("time between queries (-want +got):\n%s", d)
		}
	})
}

func TestBackoffZeroValue(t *testing.T) {
	var b Backoff
	var got []time.Duration
	for range 9 {
		got = append(got, b.Next())
	}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second, 30 * time.Second}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("zero Backoff's waits (-want +got):\n%s", d)
	}
	b.Reset()
	if d := b.Next(); d != 500*time.Millisecond {
		t.Errorf("after Reset: %v, want 500ms", d)
	}
}

// Each query runs under Deadline(Wait): one that hangs is abandoned then,
// reported as a failure, and asked again after the backoff.
func TestQueryDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		const wait = 10 * time.Second
		var starts []time.Time
		var errs []error
		w := Watch[int]{
			Wait:    wait,
			Backoff: Backoff{First: time.Second, Max: time.Second},
			Fetch: func(qctx context.Context, q Query) (int, uint64, error) {
				starts = append(starts, time.Now())
				if q.Wait != wait {
					t.Errorf("query's wait %v, want %v", q.Wait, wait)
				}
				dl, ok := qctx.Deadline()
				if !ok || time.Until(dl) != Deadline(wait) {
					t.Errorf("query's deadline in %v (set: %v), want %v", time.Until(dl), ok, Deadline(wait))
				}
				if len(starts) == 2 {
					cancel()
				}
				<-qctx.Done() // a server that never answers
				return 0, 0, qctx.Err()
			},
			OnAnswer: func(int, uint64) { t.Error("an answer from a server that never answers") },
			OnError:  func(err error, _ time.Duration) { errs = append(errs, err) },
		}
		w.Run(ctx)
		if len(errs) != 1 || !errors.Is(errs[0], context.DeadlineExceeded) {
			t.Errorf("failures %v, want one deadline exceeded (none once the watch's context ended)", errs)
		}
		if len(starts) != 2 || starts[1].Sub(starts[0]) != Deadline(wait)+time.Second {
			t.Errorf("queries at %v, want two, the second after the deadline (%v) and the backoff", starts, Deadline(wait))
		}
		if Deadline(5*time.Minute) != 5*time.Minute+5*time.Minute/16+30*time.Second {
			t.Errorf("Deadline(5m) = %v", Deadline(5*time.Minute))
		}
	})
}

// Ending the context ends Run while it waits out a backoff or a query,
// without a failure reported for the ended query.
func TestCancelEndsRun(t *testing.T) {
	for _, during := range []string{"backoff", "query"} {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			queries, reports := 0, 0
			w := Watch[int]{
				Fetch: func(qctx context.Context, _ Query) (int, uint64, error) {
					queries++
					if during == "backoff" {
						return 0, 0, errors.New("refused")
					}
					<-qctx.Done()
					return 0, 0, qctx.Err()
				},
				OnAnswer: func(int, uint64) {},
				OnError:  func(error, time.Duration) { reports++ },
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				w.Run(ctx)
			}()
			synctest.Wait() // Run is blocked in its backoff or its query
			cancel()
			<-done
			wantReports := map[string]int{"backoff": 1, "query": 0}[during]
			if queries != 1 || reports != wantReports {
				t.Errorf("during %s: %d queries, %d failures reported; want 1 and %d", during, queries, reports, wantReports)
			}
		})
	}
}

// Nomad's Fetch asks Nomad's HTTP API with the query's index and wait and
// the options the call sets, and reads the answer's index from
// X-Nomad-Index, through the real client.
func TestNomadFetch(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	script := []string{"11", "4", "4", "12"}
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		q := r.URL.Query()
		asked = append(asked, r.URL.Path+" index="+q.Get("index")+" wait="+q.Get("wait")+" namespace="+q.Get("namespace"))
		if len(script) == 0 {
			cancel()
			http.Error(w, "done", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("X-Nomad-Index", script[0])
		script = script[1:]
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`[{"ID":"llmgw-a"}]` + "\n"))
	}))
	defer srv.Close()
	client, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	w := Watch[[]*api.JobListStub]{
		Wait: time.Minute,
		Fetch: Nomad(func(q *api.QueryOptions) ([]*api.JobListStub, *api.QueryMeta, error) {
			q.Namespace = "ml"
			return client.Jobs().List(q)
		}),
		OnAnswer: func(jobs []*api.JobListStub, index uint64) {
			if len(jobs) != 1 || jobs[0].ID != "llmgw-a" {
				t.Errorf("jobs %v", jobs)
			}
			got = append(got, index)
		},
		OnError: func(err error, _ time.Duration) {
			if ctx.Err() == nil {
				t.Errorf("unexpected failure: %v", err)
			}
		},
	}
	w.Run(ctx)
	mu.Lock()
	defer mu.Unlock()
	want := []string{
		"/v1/jobs index= wait=60000ms namespace=ml",
		"/v1/jobs index=11 wait=60000ms namespace=ml",
		"/v1/jobs index= wait=60000ms namespace=ml", // 4 went backwards: a plain read
		"/v1/jobs index=4 wait=60000ms namespace=ml",
		"/v1/jobs index=12 wait=60000ms namespace=ml",
	}
	if d := cmp.Diff(want, asked); d != "" {
		t.Errorf("requests (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]uint64{11, 4, 12}, got); d != "" {
		t.Errorf("delivered indexes (-want +got):\n%s", d)
	}
}
