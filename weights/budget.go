package weights

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/llmgw/llmgw/internal/atomicfile"
	"github.com/llmgw/llmgw/weightsapi"
)

// reservation is what a running fetch will add to the store.
type reservation struct {
	Key   string `json:"key"`
	Bytes int64  `json:"bytes"`
}

func (s *Store) reservationPath(key string) string {
	return filepath.Join(s.cfg.Dir, ".llmgw", "fetching", key+".json")
}

// reserve makes room for m before its fetch starts: within BudgetBytes
// (the models held plus the fetches running) and within the disk's free
// space, evicting models no replica on the node uses, least recently used
// first. A model that cannot fit is an error naming what holds the room.
func (s *Store) reserve(ctx context.Context, m Model, partDir string, events func(Event)) error {
	unlock, err := s.lock(ctx, "store", nil)
	if err != nil {
		return err
	}
	defer unlock()
	// Bytes still to write (a cut fetch's part counts as written).
	var toWrite int64
	for _, f := range m.Files {
		if f.Size < 0 {
			continue
		}
		have := int64(0)
		if fi, err := os.Stat(filepath.Join(partDir, partName(m.Key, f))); err == nil {
			have = min(fi.Size(), f.Size)
		}
		toWrite += f.Size - have
	}
	models, err := s.Models()
	if err != nil {
		return err
	}
	held := func() (n int64) {
		for _, o := range models {
			n += o.Bytes
		}
		return n
	}
	others := s.reservations(m.Key)
	var free int64
	var st unix.Statfs_t
	if err := unix.Statfs(s.cfg.Dir, &st); err == nil {
		free = int64(st.Bavail) * st.Bsize //nolint:gosec // block counts fit an int64
	} else {
		free = -1
	}
	fits := func() bool {
		if s.cfg.BudgetBytes > 0 && held()+others+m.Bytes > s.cfg.BudgetBytes {
			return false
		}
		return free < 0 || toWrite <= free
	}
	sortByUse(models)
	for !fits() {
		victim := -1
		for i, o := range models {
			// Not one in use, nor one another process is ensuring
			// right now (its model lock held: about to hand it out).
			if o.Key != m.Key && !s.InUse(o.Key) && !s.held("model-"+o.Key) {
				victim = i
				break
			}
		}
		if victim < 0 {
			break
		}
		o := models[victim]
		if err := s.evict(o, models); err != nil {
			return err
		}
		events(Event{Message: fmt.Sprintf("Evicted %s (%s, last used %s): no replica on this node uses it, and %s needs the room",
			o.Source, formatBytes(o.Bytes), o.UsedAt.UTC().Format("2006-01-02 15:04:05Z"), m.Source),
			Annotations: map[string]string{"key": o.Key, "evicted_bytes": fmt.Sprint(o.Bytes)}})
		models = append(models[:victim], models[victim+1:]...)
		free += o.Bytes
	}
	if !fits() {
		var inUse []string
		for _, o := range models {
			inUse = append(inUse, fmt.Sprintf("%s %s", o.Source, formatBytes(o.Bytes)))
		}
		if s.cfg.BudgetBytes > 0 && held()+others+m.Bytes > s.cfg.BudgetBytes {
			return permanent{fmt.Errorf("model store %s: %s needs %s; the budget is %s, held by models in use (%s) and fetches running (%s)",
				s.cfg.Dir, m.Source, formatBytes(m.Bytes), formatBytes(s.cfg.BudgetBytes), strings.Join(inUse, ", "), formatBytes(others))}
		}
		return permanent{fmt.Errorf("model store %s: %s needs %s more on disk; %s free after evicting every model no replica uses (in use: %s)",
			s.cfg.Dir, m.Source, formatBytes(toWrite), formatBytes(free), strings.Join(inUse, ", "))}
	}
	if err := atomicfile.WriteJSON(s.reservationPath(m.Key), reservation{Key: m.Key, Bytes: m.Bytes}); err != nil {
		return fmt.Errorf("model store: %w", err)
	}
	return nil
}

// reservations sums the running fetches but key's; one whose process is
// gone (its model lock free) is dropped.
func (s *Store) reservations(key string) int64 {
	dir := filepath.Join(s.cfg.Dir, ".llmgw", "fetching")
	ents, _ := os.ReadDir(dir)
	var n int64
	for _, e := range ents {
		k, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || k == key || strings.HasPrefix(k, ".") {
			continue
		}
		if !s.held("model-" + k) {
			_ = os.Remove(filepath.Join(dir, e.Name()))
			continue
		}
		var r reservation
		if b, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil && json.Unmarshal(b, &r) == nil {
			n += r.Bytes
		}
	}
	return n
}

// evict removes o: its record first (from then on the node no longer
// holds it), then its files that no other model the store holds shares.
func (s *Store) evict(o Model, all []Model) error {
	if err := os.Remove(s.recordPath(o.Key)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("model store: evict %s: %w", o.Key, err)
	}
	if o.Commit == "" {
		return os.RemoveAll(o.Dir)
	}
	shared := map[string]bool{}
	for _, other := range all {
		if other.Key == o.Key || other.Commit == "" {
			continue
		}
		for _, f := range other.Files {
			shared[filepath.Join(other.Dir, f.Name)] = true
			shared[f.SHA256] = true
		}
	}
	blobs := filepath.Join(filepath.Dir(filepath.Dir(o.Dir)), "blobs")
	for _, f := range o.Files {
		if link := filepath.Join(o.Dir, f.Name); !shared[link] {
			_ = os.Remove(link)
		}
		if !shared[f.SHA256] {
			_ = os.Remove(filepath.Join(blobs, f.SHA256))
		}
	}
	if ents, err := os.ReadDir(o.Dir); err == nil && len(ents) == 0 {
		_ = os.Remove(o.Dir)
		if o.Revision != o.Commit {
			ref := filepath.Join(filepath.Dir(filepath.Dir(o.Dir)), "refs", filepath.FromSlash(o.Revision))
			if b, err := os.ReadFile(ref); err == nil && strings.TrimSpace(string(b)) == o.Commit {
				_ = os.Remove(ref)
			}
		}
	}
	return nil
}

// lease is a process that uses a model: while it lives, the model is not
// evicted.
type lease struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"` // /proc/<pid>/stat's starttime, so a reused pid is not taken for it
}

func (s *Store) leaseDir(key string) string {
	return filepath.Join(s.cfg.Dir, ".llmgw", "leases", key)
}

// Acquire records that process pid (a replica's engine or its supervisor)
// uses the model key, as owner (the task's id): the model is not evicted
// while that process lives, even if Release is never called.
func (s *Store) Acquire(key, owner string, pid int) error {
	st, err := procStart(pid)
	if err != nil {
		return fmt.Errorf("model store: lease of %s: %w", key, err)
	}
	if err := os.MkdirAll(s.leaseDir(key), 0o755); err != nil {
		return fmt.Errorf("model store: %w", err)
	}
	if err := atomicfile.WriteJSON(filepath.Join(s.leaseDir(key), weightsapi.Sanitize(owner)+".json"), lease{PID: pid, StartTime: st}); err != nil {
		return fmt.Errorf("model store: %w", err)
	}
	if m, ok, _ := s.Lookup(key); ok {
		s.touch(&m)
	}
	return nil
}

// Release drops owner's lease of key.
func (s *Store) Release(key, owner string) error {
	err := os.Remove(filepath.Join(s.leaseDir(key), weightsapi.Sanitize(owner)+".json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("model store: %w", err)
	}
	if m, ok, _ := s.Lookup(key); ok {
		s.touch(&m)
	}
	return nil
}

// InUse reports whether a live process holds a lease of key; leases of
// processes gone are dropped.
func (s *Store) InUse(key string) bool {
	ents, _ := os.ReadDir(s.leaseDir(key))
	live := false
	for _, e := range ents {
		p := filepath.Join(s.leaseDir(key), e.Name())
		var l lease
		b, err := os.ReadFile(p)
		if err != nil || json.Unmarshal(b, &l) != nil {
			continue
		}
		if st, err := procStart(l.PID); err == nil && st == l.StartTime {
			live = true
			continue
		}
		_ = os.Remove(p)
	}
	return live
}

func procStart(pid int) (uint64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return st.Starttime, nil
}
