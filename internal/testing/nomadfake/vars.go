package nomadfake

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Nomad's variable lock limits and defaults (nomad/structs/variables.go).
const (
	minLockTTL       = 10 * time.Second
	maxLockTTL       = 24 * time.Hour
	defaultLockTTL   = 15 * time.Second
	defaultLockDelay = 15 * time.Second
	maxVariableSize  = 65536
)

var validVarPath = regexp.MustCompile("^[a-zA-Z0-9-_~/]{1,128}$")

type lockState struct {
	id         string
	ttl, delay time.Duration
	// renewed is the last acquire or renewal. The lock's TTL timer, like
	// Nomad's, runs for 2×TTL from it; after that the lock cannot be renewed
	// and, LockDelay later, it is released.
	renewed time.Time
	expired bool
}

type varRecord struct {
	v    api.Variable // Lock is always nil here; see lock
	lock *lockState
}

func (l *lockState) api() *api.VariableLock {
	return &api.VariableLock{ID: l.id, TTL: l.ttl.String(), LockDelay: l.delay.String()}
}

// out is the variable as the API shows it to a management token: with
// its lock.
func (vr *varRecord) out() *api.Variable {
	v := vr.v
	v.Items = maps.Clone(vr.v.Items)
	if vr.lock != nil {
		v.Lock = vr.lock.api()
	}
	return &v
}

func (vr *varRecord) meta() *api.VariableMetadata {
	m := vr.v.Metadata()
	if vr.lock != nil {
		m.Lock = vr.lock.api()
	}
	return m
}

// varBody is a variable in a request; its lock durations may be strings or
// nanoseconds, as Nomad's VariableLock.UnmarshalJSON accepts.
type varBody struct {
	Namespace string
	Path      string
	Items     map[string]string
	Lock      *struct {
		ID        string
		TTL       any
		LockDelay any
	}
}

func parseLockDuration(v any) (time.Duration, error) {
	switch x := v.(type) {
	case nil:
		return 0, nil
	case string:
		if x == "" {
			return 0, nil
		}
		return time.ParseDuration(x)
	case float64:
		return time.Duration(x), nil
	default:
		return 0, fmt.Errorf("invalid duration %v", v)
	}
}

func itemsSize(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v)
	}
	return n
}

func zeroVar(ns, path string) *api.Variable {
	return &api.Variable{Namespace: ns, Path: path}
}

// sweepLocksLocked applies the clock to variable locks: a lock whose TTL
// timer (2×TTL since its last renewal) has run out can no longer be renewed;
// LockDelay after that it is released, as Nomad's lock TTL timers do.
func (s *Server) sweepLocksLocked() {
	var keys []nsKey
	for k, vr := range s.vars {
		if vr.lock != nil {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return
	}
	now := s.now()
	var idx uint64
	sort.Slice(keys, func(i, j int) bool { return keys[i].ns+"/"+keys[i].id < keys[j].ns+"/"+keys[j].id })
	for _, k := range keys {
		vr := s.vars[k]
		l := vr.lock
		expiry := l.renewed.Add(2 * l.ttl)
		if !now.Before(expiry) {
			l.expired = true
		}
		if l.expired && !now.Before(expiry.Add(l.delay)) {
			if idx == 0 {
				idx = s.nextIndexLocked()
			}
			vr.lock = nil
			vr.v.ModifyIndex = idx
			vr.v.ModifyTime = now.UnixNano()
			s.touchLocked(idx, tableVars)
		}
	}
	if idx != 0 {
		s.notifyLocked()
	}
}

func (s *Server) handleVarList(w http.ResponseWriter, r *http.Request) {
	ns := namespace(r)
	prefix := r.URL.Query().Get("prefix")
	s.query(w, r, func() (any, uint64, *httpError) {
		out := []*api.VariableMetadata{}
		for k, vr := range s.vars {
			if nsMatches(ns, k.ns) && strings.HasPrefix(k.id, prefix) {
				out = append(out, vr.meta())
			}
		}
		sort.Slice(out, func(i, j int) bool {
			if out[i].Namespace != out[j].Namespace {
				return out[i].Namespace < out[j].Namespace
			}
			return out[i].Path < out[j].Path
		})
		return out, s.tableIndexLocked(tableVars), nil
	})
}

func (s *Server) handleVar(w http.ResponseWriter, r *http.Request, path string) {
	if path == "" {
		writeError(w, errorf(http.StatusBadRequest, "missing variable path"))
		return
	}
	switch r.Method {
	case http.MethodGet:
		ns := namespace(r)
		s.query(w, r, func() (any, uint64, *httpError) {
			vr := s.vars[nsKey{ns, path}]
			if vr == nil {
				return nil, s.missingIndexLocked(tableVars), errorf(http.StatusNotFound, "variable not found")
			}
			return vr.out(), vr.v.ModifyIndex, nil
		})
	case http.MethodPut, http.MethodPost:
		q := r.URL.Query()
		var ops []string
		for _, op := range []string{"lock-acquire", "lock-renew", "lock-release"} {
			if _, ok := q[op]; ok {
				ops = append(ops, op)
			}
		}
		if len(ops) > 1 {
			writeError(w, errorf(http.StatusBadRequest, "multiple lock operations"))
			return
		}
		if len(ops) == 1 && q.Get("cas") != "" {
			writeError(w, errorf(http.StatusBadRequest, "CAS can't be used with lock operations"))
			return
		}
		var body varBody
		if err := decodeBody(r, &body); err != nil {
			writeError(w, err)
			return
		}
		ns := body.Namespace
		if ns == "" {
			ns = namespace(r)
		}
		switch {
		case len(ops) == 0:
			s.varUpsert(w, r, ns, path, &body)
		case ops[0] == "lock-acquire":
			s.varLockAcquire(w, ns, path, &body)
		case ops[0] == "lock-renew":
			s.varLockRenew(w, ns, path, &body)
		default:
			s.varLockRelease(w, ns, path, &body)
		}
	case http.MethodDelete:
		s.varDelete(w, r, path)
	default:
		writeError(w, errorf(http.StatusBadRequest, "Invalid method"))
	}
}

func parseCAS(r *http.Request) (bool, uint64, *httpError) {
	cq := r.URL.Query().Get("cas")
	if cq == "" {
		return false, 0, nil
	}
	n, err := strconv.ParseUint(cq, 10, 64)
	if err != nil {
		return true, 0, errorf(http.StatusBadRequest, "can not parse cas: %v", err)
	}
	return true, n, nil
}

func validateVarPath(path string) *httpError {
	if !validVarPath.MatchString(path) {
		return errorf(http.StatusBadRequest, "invalid path %q", path)
	}
	return nil
}

func writeConflict(w http.ResponseWriter, v *api.Variable) {
	writeJSON(w, http.StatusConflict, v.ModifyIndex, v)
}

// lockedAgainst reports whether vr's lock refuses a write carrying lockID.
func (vr *varRecord) lockedAgainst(b *varBody) bool {
	return vr != nil && vr.lock != nil && (b.Lock == nil || b.Lock.ID != vr.lock.id)
}

func (s *Server) varUpsert(w http.ResponseWriter, r *http.Request, ns, path string, b *varBody) {
	if len(b.Items) == 0 {
		writeError(w, errorf(http.StatusBadRequest, "variable missing required Items object"))
		return
	}
	if b.Lock != nil {
		ttl, err1 := parseLockDuration(b.Lock.TTL)
		delay, err2 := parseLockDuration(b.Lock.LockDelay)
		if err1 != nil || err2 != nil || ttl != 0 || delay != 0 {
			writeError(w, errorf(http.StatusBadRequest, "variable should not contain lock definition"))
			return
		}
	}
	if err := validateVarPath(path); err != nil {
		writeError(w, err)
		return
	}
	if itemsSize(b.Items) > maxVariableSize {
		writeError(w, errorf(http.StatusBadRequest, "variables are limited to 64KiB in total size"))
		return
	}
	isCAS, cas, herr := parseCAS(r)
	if herr != nil {
		writeError(w, herr)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := nsKey{ns, path}
	vr := s.vars[k]
	if isCAS {
		switch {
		case cas == 0 && vr != nil:
			writeConflict(w, vr.out())
			return
		case cas != 0 && vr == nil:
			writeConflict(w, zeroVar(ns, path))
			return
		case vr != nil && cas != vr.v.ModifyIndex:
			writeConflict(w, vr.out())
			return
		}
	}
	if vr.lockedAgainst(b) {
		writeConflict(w, zeroVar(ns, path))
		return
	}
	idx := s.nextIndexLocked()
	now := s.nowNano()
	if vr == nil {
		vr = &varRecord{v: api.Variable{Namespace: ns, Path: path, CreateIndex: idx, CreateTime: now}}
		s.vars[k] = vr
	}
	vr.v.Items = maps.Clone(b.Items)
	vr.v.ModifyIndex, vr.v.ModifyTime = idx, now
	s.touchLocked(idx, tableVars)
	s.notifyLocked()
	writeJSON(w, http.StatusOK, idx, vr.out())
}

func (s *Server) varDelete(w http.ResponseWriter, r *http.Request, path string) {
	ns := namespace(r)
	isCAS, cas, herr := parseCAS(r)
	if herr != nil {
		writeError(w, herr)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := nsKey{ns, path}
	vr := s.vars[k]
	if isCAS {
		switch {
		case cas == 0 && vr == nil:
			w.Header().Set("X-Nomad-Index", strconv.FormatUint(s.index, 10))
			w.WriteHeader(http.StatusNoContent)
			return
		case cas != 0 && vr == nil:
			writeConflict(w, zeroVar(ns, path))
			return
		case cas == 0 || cas != vr.v.ModifyIndex:
			writeConflict(w, vr.out())
			return
		}
	}
	if vr == nil {
		w.Header().Set("X-Nomad-Index", strconv.FormatUint(s.index, 10))
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if vr.lock != nil {
		// A delete carries no lock ID over HTTP, so a locked variable
		// cannot be deleted until its lock is released.
		writeConflict(w, zeroVar(ns, path))
		return
	}
	idx := s.nextIndexLocked()
	delete(s.vars, k)
	s.touchLocked(idx, tableVars)
	s.notifyLocked()
	w.Header().Set("X-Nomad-Index", strconv.FormatUint(idx, 10))
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) varLockAcquire(w http.ResponseWriter, ns, path string, b *varBody) {
	var id string
	var ttl, delay time.Duration
	if b.Lock != nil {
		var err1, err2 error
		id = b.Lock.ID
		ttl, err1 = parseLockDuration(b.Lock.TTL)
		delay, err2 = parseLockDuration(b.Lock.LockDelay)
		if err1 != nil || err2 != nil {
			writeError(w, errorf(http.StatusBadRequest, "invalid lock durations"))
			return
		}
	}
	if ttl == 0 {
		ttl = defaultLockTTL
	}
	if delay == 0 {
		delay = defaultLockDelay
	}
	if ttl < 0 || delay < 0 {
		writeError(w, errorf(http.StatusBadRequest, "Lock delay and TTL must be positive"))
		return
	}
	if ttl < minLockTTL || ttl > maxLockTTL {
		writeError(w, errorf(http.StatusBadRequest, "TTL must be between 10 seconds and 24 hours"))
		return
	}
	if err := validateVarPath(path); err != nil {
		writeError(w, err)
		return
	}
	if itemsSize(b.Items) > maxVariableSize {
		writeError(w, errorf(http.StatusBadRequest, "variables are limited to 64KiB in total size"))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := nsKey{ns, path}
	vr := s.vars[k]
	if vr != nil && vr.lock != nil && vr.lock.id != id {
		writeConflict(w, zeroVar(ns, path))
		return
	}
	if id == "" {
		id = newID()
	}
	idx := s.nextIndexLocked()
	now := s.now()
	if vr == nil {
		vr = &varRecord{v: api.Variable{Namespace: ns, Path: path, CreateIndex: idx, CreateTime: now.UnixNano()}}
		s.vars[k] = vr
	}
	// Like Nomad, acquiring overwrites the variable's items with the
	// request's.
	vr.v.Items = maps.Clone(b.Items)
	vr.v.ModifyIndex, vr.v.ModifyTime = idx, now.UnixNano()
	vr.lock = &lockState{id: id, ttl: ttl, delay: delay, renewed: now}
	s.touchLocked(idx, tableVars)
	s.notifyLocked()
	writeJSON(w, http.StatusOK, idx, vr.out())
}

func (s *Server) varLockRenew(w http.ResponseWriter, ns, path string, b *varBody) {
	if b.Lock == nil || b.Lock.ID == "" {
		writeError(w, errorf(http.StatusBadRequest, "missing lock ID"))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	vr := s.vars[nsKey{ns, path}]
	switch {
	case vr == nil:
		writeError(w, errorf(http.StatusNotFound, "variable doesn't exist"))
	case vr.lock == nil:
		writeError(w, errorf(http.StatusConflict, "variable doesn't hold a lock"))
	case vr.lock.id != b.Lock.ID || vr.lock.expired:
		writeError(w, errorf(http.StatusConflict, "attempting to modify locked variable"))
	default:
		vr.lock.renewed = s.now()
		writeJSON(w, http.StatusOK, vr.v.ModifyIndex, vr.meta())
	}
}

func (s *Server) varLockRelease(w http.ResponseWriter, ns, path string, b *varBody) {
	if b.Lock == nil || b.Lock.ID == "" {
		writeError(w, errorf(http.StatusBadRequest, "missing lock information"))
		return
	}
	if b.Items != nil {
		writeError(w, errorf(http.StatusBadRequest, "lock release operation doesn't take variable items"))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	vr := s.vars[nsKey{ns, path}]
	switch {
	case vr == nil:
		writeError(w, errorf(http.StatusInternalServerError, "variable doesn't exist"))
		return
	case vr.lock == nil:
		writeError(w, errorf(http.StatusInternalServerError, "variable doesn't hold a lock"))
		return
	case vr.lock.id != b.Lock.ID:
		z := zeroVar(ns, path)
		z.Lock = &api.VariableLock{}
		writeConflict(w, z)
		return
	}
	idx := s.nextIndexLocked()
	vr.lock = nil
	vr.v.ModifyIndex, vr.v.ModifyTime = idx, s.nowNano()
	s.touchLocked(idx, tableVars)
	s.notifyLocked()
	out := vr.out()
	out.Items = nil
	writeJSON(w, http.StatusOK, idx, out)
}

// Variable returns a copy of a variable with its lock, or nil.
func (s *Server) Variable(namespace, path string) *api.Variable {
	if namespace == "" {
		namespace = api.DefaultNamespace
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	vr := s.vars[nsKey{namespace, path}]
	if vr == nil {
		return nil
	}
	b, _ := json.Marshal(vr.out())
	var out api.Variable
	_ = json.Unmarshal(b, &out)
	return &out
}
