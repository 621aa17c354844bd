package nomadfake_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/internal/testing/fakeclock"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
)

func TestVariablesCheckAndSet(t *testing.T) {
	_, c := newFake(t)
	vars := c.Variables()

	created, wm, err := vars.CheckedCreate(&api.Variable{Path: "llmgw/holds", Items: api.VariableItems{"rack=r01": `{"reason":"maint"}`}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if created.ModifyIndex == 0 || created.CreateIndex != created.ModifyIndex || wm.LastIndex != created.ModifyIndex || created.Namespace != "default" {
		t.Fatalf("created %+v, write index %d", created, wm.LastIndex)
	}

	// Create-only again: a conflict carrying the current variable.
	_, _, err = vars.CheckedCreate(&api.Variable{Path: "llmgw/holds", Items: api.VariableItems{"x": "y"}}, nil)
	var conflict api.ErrCASConflict
	if !errors.As(err, &conflict) {
		t.Fatalf("second create-only: %v, want ErrCASConflict", err)
	}
	if conflict.Conflict.ModifyIndex != created.ModifyIndex || conflict.Conflict.Items["rack=r01"] == "" {
		t.Errorf("conflict body %+v, want the stored variable", conflict.Conflict)
	}

	// Update with a stale index conflicts; with the current one it lands.
	stale := created.Copy()
	stale.ModifyIndex = created.ModifyIndex - 1
	stale.Items["rack=r02"] = "{}"
	if _, _, err := vars.CheckedUpdate(stale, nil); !errors.As(err, &conflict) {
		t.Errorf("stale update: %v, want a conflict", err)
	}
	upd := created.Copy()
	upd.Items["rack=r02"] = "{}"
	updated, _, err := vars.CheckedUpdate(upd, nil)
	if err != nil {
		t.Fatal(err)
	}
	if updated.ModifyIndex <= created.ModifyIndex || updated.CreateIndex != created.CreateIndex || len(updated.Items) != 2 {
		t.Errorf("updated %+v", updated)
	}

	// Deletes check too.
	if _, err := vars.CheckedDelete("llmgw/holds", created.ModifyIndex, nil); !errors.As(err, &conflict) {
		t.Errorf("stale delete: %v, want a conflict", err)
	}
	if _, err := vars.CheckedDelete("llmgw/holds", updated.ModifyIndex, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := vars.Read("llmgw/holds", nil); !errors.Is(err, api.ErrVariablePathNotFound) {
		t.Errorf("read after delete: %v, want ErrVariablePathNotFound", err)
	}
	// Update-if-exists on a missing variable conflicts with a zero value.
	_, _, err = vars.CheckedUpdate(&api.Variable{Path: "llmgw/holds", ModifyIndex: 9, Items: api.VariableItems{"a": "b"}}, nil)
	if !errors.As(err, &conflict) || conflict.Conflict.ModifyIndex != 0 {
		t.Errorf("update of a missing variable: %v", err)
	}
	if _, _, err := vars.Create(&api.Variable{Path: "llmgw/empty"}, nil); statusCode(err) != 400 {
		t.Errorf("variable without items: %v, want 400", err)
	}
}

func TestVariablesListPrefix(t *testing.T) {
	_, c := newFake(t)
	for _, p := range []string{"llmgw/decisions/m-0", "llmgw/decisions/m-1", "llmgw/holds", "other/x"} {
		if _, _, err := c.Variables().Create(&api.Variable{Path: p, Items: api.VariableItems{"k": "v"}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	list, qm, err := c.Variables().PrefixList("llmgw/decisions/", nil)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, v := range list {
		paths = append(paths, v.Path)
	}
	if diff := cmp.Diff([]string{"llmgw/decisions/m-0", "llmgw/decisions/m-1"}, paths); diff != "" {
		t.Errorf("prefix list (-want +got):\n%s", diff)
	}
	if qm.LastIndex == 0 {
		t.Error("no index on the variable list")
	}
}

func newLocks(t *testing.T, c *api.Client, ttl string) *api.Locks {
	t.Helper()
	l, err := c.Locks(api.WriteOptions{}, api.Variable{Path: "llmgw/leader", Lock: &api.VariableLock{TTL: ttl, LockDelay: "5s"}})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestVariableLockLeaseWithFakeClock(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s, c := newFake(t, nomadfake.WithClock(clock.Now))
	ctx := t.Context()
	leader, standby := newLocks(t, c, "10s"), newLocks(t, c, "10s")

	path, err := leader.Acquire(ctx)
	if err != nil || path != "llmgw/leader" {
		t.Fatalf("leader acquire: %q, %v", path, err)
	}
	v := s.Variable("", "llmgw/leader")
	if v == nil || v.Lock == nil || v.Lock.TTL != "10s" || v.Lock.LockDelay != "5s" || v.Lock.ID == "" {
		t.Fatalf("locked variable %+v", v)
	}
	if _, err := standby.Acquire(ctx); !errors.Is(err, api.ErrLockConflict) {
		t.Fatalf("standby acquire while held: %v, want ErrLockConflict", err)
	}
	// A plain write to the locked variable is refused too.
	if _, _, err := c.Variables().Update(&api.Variable{Path: "llmgw/leader", Items: api.VariableItems{"x": "y"}}, nil); statusCode(err) != 409 {
		t.Errorf("write to a locked variable: %v, want 409", err)
	}

	// Renewals keep it: 15s later (within 2×TTL) and again.
	clock.Advance(15 * time.Second)
	if err := leader.Renew(ctx); err != nil {
		t.Fatalf("renew within the lease: %v", err)
	}
	clock.Advance(15 * time.Second)
	if err := leader.Renew(ctx); err != nil {
		t.Fatalf("second renew: %v", err)
	}

	// The leader stops renewing: after 2×TTL renewals fail, but the lock
	// stays for LockDelay, so the standby still cannot take it.
	clock.Advance(20 * time.Second)
	if err := leader.Renew(ctx); !errors.Is(err, api.ErrLockConflict) {
		t.Fatalf("renew after expiry: %v, want ErrLockConflict", err)
	}
	if _, err := standby.Acquire(ctx); !errors.Is(err, api.ErrLockConflict) {
		t.Fatalf("standby acquire during the lock delay: %v, want ErrLockConflict", err)
	}

	// After the delay the lock is released; Tick wakes a blocked reader.
	before := s.Variable("", "llmgw/leader").ModifyIndex
	clock.Advance(5 * time.Second)
	s.Tick()
	after := s.Variable("", "llmgw/leader")
	if after.Lock != nil || after.ModifyIndex <= before {
		t.Fatalf("after the delay: %+v (index was %d), want unlocked at a new index", after, before)
	}
	if _, err := standby.Acquire(ctx); err != nil {
		t.Fatalf("standby acquire after expiry: %v", err)
	}
	if err := leader.Release(ctx); !errors.Is(err, api.ErrLockConflict) {
		t.Errorf("old leader release: %v, want ErrLockConflict", err)
	}
	if err := standby.Release(ctx); err != nil {
		t.Fatalf("standby release: %v", err)
	}
	if v := s.Variable("", "llmgw/leader"); v.Lock != nil {
		t.Errorf("after release: %+v", v.Lock)
	}
	if _, err := c.Locks(api.WriteOptions{}, api.Variable{Path: "llmgw/x", Lock: &api.VariableLock{TTL: "1s"}}); err != nil {
		t.Fatal(err)
	}
	bad := newLocks(t, c, "1s")
	if _, err := bad.Acquire(ctx); statusCode(err) != 400 {
		t.Errorf("TTL under 10s: %v, want 400", err)
	}
}

func TestLockLeaserEndToEnd(t *testing.T) {
	s, c := newFake(t)
	ctx := t.Context()
	held := make(chan bool, 1)
	leaser := c.NewLockLeaser(newLocks(t, c, "15s"), api.LockLeaserOptionWithEarlyReturn(true))
	err := leaser.Start(ctx, func(ctx context.Context) error {
		v := s.Variable("", "llmgw/leader")
		held <- v != nil && v.Lock != nil
		// While this runs, a second leaser gives up at once.
		other := c.NewLockLeaser(newLocks(t, c, "15s"), api.LockLeaserOptionWithEarlyReturn(true))
		ran := false
		if err := other.Start(ctx, func(context.Context) error { ran = true; return nil }); err != nil || ran {
			t.Errorf("second leaser: err %v ran %v, want nil and not run", err, ran)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("leaser: %v", err)
	}
	if !<-held {
		t.Error("protected function ran without the lock held")
	}
	if v := s.Variable("", "llmgw/leader"); v == nil || v.Lock != nil {
		t.Errorf("after Start returned: %+v, want the lock released", v)
	}
}
