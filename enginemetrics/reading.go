package enginemetrics

import (
	"math"
	"slices"
)

// Between is the reading of cur, with rates over the interval since prev:
// the gauges are cur's; tokens per second is the running total's growth
// over the time between the scrapes; time to first token is taken from the
// histogram's growth, so it covers only the requests that got their first
// token in between (a cumulative histogram's own mean would be the mean
// since the engine started, which hides a slow minute after a quiet day).
//
// A running total that went down means the engine restarted in between:
// as Prometheus's rate() does, the growth is then taken to be cur's whole
// value, the least that can have happened, and Reading.Reset is set. A
// zero prev (the first scrape) or one not before cur leaves the rates
// unknown.
func Between(prev, cur Sample) Reading {
	r := Reading{
		At:              cur.At,
		RequestsWaiting: cur.Waiting,
		RequestsRunning: cur.Running,
		KVCacheUsage:    cur.KVCache,
		Adapters:        cur.Adapters,
		Absent:          slices.Clone(cur.Absent),
		Missing:         slices.Clone(cur.Missing),
	}
	if prev.At.IsZero() || !cur.At.After(prev.At) {
		return r
	}
	r.Since = prev.At
	secs := cur.At.Sub(prev.At).Seconds()
	if prev.Tokens.Known && cur.Tokens.Known {
		grew := cur.Tokens.V - prev.Tokens.V
		if grew < 0 {
			grew, r.Reset = cur.Tokens.V, true
		}
		r.TokensPerSecond = Known(grew / secs)
	}
	if prev.TTFT != nil && cur.TTFT != nil {
		d, reset := histogramDelta(*prev.TTFT, *cur.TTFT)
		r.Reset = r.Reset || reset
		r.TTFT.Count = Known(d.Count)
		if d.Count > 0 {
			r.TTFT.Mean = Known(d.Sum / d.Count)
			r.TTFT.P50 = quantile(0.5, d)
			r.TTFT.P90 = quantile(0.9, d)
		}
	}
	return r
}

// histogramDelta is what cur observed since prev. A count or bucket that
// went down is a restart: cur whole. Buckets whose bounds changed are
// dropped (the count and sum still hold).
func histogramDelta(prev, cur Histogram) (Histogram, bool) {
	if cur.Count < prev.Count || cur.Sum < prev.Sum {
		return cur, true
	}
	if prev.Count == 0 {
		// Nothing observed before (a family declared without series has
		// no buckets either): all of cur is new.
		return cur, false
	}
	d := Histogram{Count: cur.Count - prev.Count, Sum: cur.Sum - prev.Sum}
	if len(prev.Buckets) != len(cur.Buckets) || cur.Buckets == nil {
		return d, false
	}
	d.Buckets = make([]Bucket, len(cur.Buckets))
	for i, b := range cur.Buckets {
		p := prev.Buckets[i]
		if p.UpperBound != b.UpperBound {
			d.Buckets = nil
			return d, false
		}
		if b.Count < p.Count {
			return cur, true
		}
		d.Buckets[i] = Bucket{UpperBound: b.UpperBound, Count: b.Count - p.Count}
	}
	return d, false
}

// quantile estimates the q-quantile of h from its cumulative buckets: the
// bucket holding the rank, interpolated linearly between its bounds (the
// lowest bucket's lower bound is 0). A rank in the +Inf bucket reads as
// the highest finite bound, which is all the histogram can say.
func quantile(q float64, h Histogram) Value {
	if len(h.Buckets) == 0 || h.Count <= 0 {
		return Value{}
	}
	rank := q * h.Count
	lower, below := 0.0, 0.0
	for _, b := range h.Buckets {
		if b.Count >= rank && b.Count > below {
			if math.IsInf(b.UpperBound, 1) {
				return Known(lower)
			}
			if b.UpperBound <= 0 {
				return Known(b.UpperBound)
			}
			return Known(lower + (b.UpperBound-lower)*(rank-below)/(b.Count-below))
		}
		lower, below = b.UpperBound, b.Count
	}
	return Known(lower)
}

// Tracker turns an engine's successive samples into readings. Its zero
// value is ready; it is not safe for concurrent use.
type Tracker struct {
	prev Sample
}

// Observe returns the reading of s against the previous sample, and keeps
// s for the next.
func (t *Tracker) Observe(s Sample) Reading {
	r := Between(t.prev, s)
	t.prev = s
	return r
}
