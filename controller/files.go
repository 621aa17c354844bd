package controller

import (
	"errors"
	"sync"
	"time"

	"github.com/llmgw/llmgw/facility"
)

// filesInForce is the catalog and facility files the controller acts on,
// and the state of their last reload and of the pass guard's refusal.
type filesInForce struct {
	// mu guards every field below. Invariant: catalog and facility are
	// always a pair that loaded without error together (a failed reload
	// sets loadErr and leaves them), and confirmed, prune and loadedAt
	// describe that pair.
	mu       sync.RWMutex
	catalog  facility.Catalog
	facility facility.Facility
	loadErr  error // the last reload's error; the previous files stay in force
	// confirmed: the files in force were loaded with the operator's
	// say-so for the stops they cause (ReloadConfirmed).
	confirmed bool
	// heldBack is the pass guard's refusal of the catalog's stops (files
	// never confirmed that stop too much); nil when it holds none back.
	heldBack error
	// prune: the stored decisions of slots not in the catalog are to be
	// deleted after the next pass (set at start and by every reload).
	prune    bool
	loadedAt time.Time // when the files in force were loaded (Options.Now)
}

// get returns the catalog and facility file in force.
func (f *filesInForce) get() (facility.Catalog, facility.Facility) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.catalog, f.facility
}

// loaded returns the catalog in force and when it was loaded.
func (f *filesInForce) loaded() (facility.Catalog, time.Time) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.catalog, f.loadedAt
}

// put makes a reload's files the ones in force.
func (f *filesInForce) put(cat facility.Catalog, fac facility.Facility, confirmed bool, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.catalog, f.facility, f.loadErr, f.loadedAt = cat, fac, nil, at
	f.confirmed, f.prune, f.heldBack = confirmed, true, nil
}

// refuse records a reload's error; the files in force stay.
func (f *filesInForce) refuse(err error) {
	f.mu.Lock()
	f.loadErr = err
	f.mu.Unlock()
}

// errs is the last reload's error and the guard's refusal, joined; nil
// when there is neither.
func (f *filesInForce) errs() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return errors.Join(f.loadErr, f.heldBack)
}

// isConfirmed reports whether the files in force were confirmed.
func (f *filesInForce) isConfirmed() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.confirmed
}

// holdBack records the pass guard's refusal (nil: none); newly reports a
// refusal where there was none, failed whether a reload error or a
// refusal stands.
func (f *filesInForce) holdBack(err error) (newly, failed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	newly = err != nil && f.heldBack == nil
	f.heldBack = err
	return newly, f.loadErr != nil || err != nil
}

// toPrune reports whether the stored decisions of removed slots are to be
// deleted; pruned says they were.
func (f *filesInForce) toPrune() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.prune
}

func (f *filesInForce) pruned() {
	f.mu.Lock()
	f.prune = false
	f.mu.Unlock()
}

// model returns the catalog's model name, or every model's name.
func (f *filesInForce) model(name string) (facility.Model, []string, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	cat := f.catalog
	var names []string
	for _, m := range cat.Models {
		if m.Name == name {
			return m, nil, true
		}
		names = append(names, m.Name)
	}
	return facility.Model{}, names, false
}
