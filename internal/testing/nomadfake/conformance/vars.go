package conformance

import (
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func casConflict(t *testing.T, what string, err error) *api.Variable {
	t.Helper()
	var c api.ErrCASConflict
	if !errors.As(err, &c) {
		t.Fatalf("%s: %v, want a check-and-set conflict (409)", what, err)
	}
	return c.Conflict
}

// VariablesCheckAndSet: ?cas=0 writes only an absent variable, ?cas=N
// only one at ModifyIndex N; a conflict answers the current variable (a
// zero one when absent); the same items again are a write too (a new
// ModifyIndex, as Nomad 2.0.5 answers); deletes
// check and set the same way; lists filter by prefix.
func VariablesCheckAndSet(t *testing.T, tg *Target) {
	vars := tg.Client.Variables()
	const path = "conf-vars/a"
	t.Cleanup(func() { _, _ = vars.Delete(path, nil); _, _ = vars.Delete("conf-vars/b", nil) })
	v, _, err := vars.CheckedCreate(&api.Variable{Path: path, Items: api.VariableItems{"k": "1"}}, nil)
	if err != nil {
		t.Fatalf("create-only write of an absent variable: %v", err)
	}
	if v.CreateIndex == 0 || v.ModifyIndex != v.CreateIndex || v.Namespace != api.DefaultNamespace || v.Items["k"] != "1" {
		t.Errorf("created %+v", v)
	}
	_, _, err = vars.CheckedCreate(&api.Variable{Path: path, Items: api.VariableItems{"k": "2"}}, nil)
	if c := casConflict(t, "create-only write of an existing variable", err); c.ModifyIndex != v.ModifyIndex || c.Items["k"] != "1" {
		t.Errorf("conflict answered %+v, want the current variable", c)
	}
	_, _, err = vars.CheckedUpdate(&api.Variable{Path: path, Items: api.VariableItems{"k": "2"}, ModifyIndex: v.ModifyIndex + 1000}, nil)
	if c := casConflict(t, "write at a wrong index", err); c.ModifyIndex != v.ModifyIndex || c.Items["k"] != "1" {
		t.Errorf("conflict answered %+v, want the current variable", c)
	}
	_, _, err = vars.CheckedUpdate(&api.Variable{Path: "conf-vars/absent", Items: api.VariableItems{"k": "2"}, ModifyIndex: 5}, nil)
	if c := casConflict(t, "write of an absent variable at an index", err); c.ModifyIndex != 0 || len(c.Items) != 0 || c.Path != "conf-vars/absent" {
		t.Errorf("conflict answered %+v, want a zero variable at the path", c)
	}
	v2, _, err := vars.CheckedUpdate(&api.Variable{Path: path, Items: api.VariableItems{"k": "2"}, ModifyIndex: v.ModifyIndex}, nil)
	if err != nil {
		t.Fatalf("write at the variable's index: %v", err)
	}
	if v2.ModifyIndex <= v.ModifyIndex || v2.CreateIndex != v.CreateIndex || v2.Items["k"] != "2" {
		t.Errorf("after the write %+v (before %+v)", v2, v)
	}
	v3, _, err := vars.Update(&api.Variable{Path: path, Items: api.VariableItems{"k": "2"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v3.ModifyIndex <= v2.ModifyIndex || v3.CreateIndex != v.CreateIndex {
		t.Errorf("the same items again: ModifyIndex %d → %d, CreateIndex %d; want a new ModifyIndex", v2.ModifyIndex, v3.ModifyIndex, v3.CreateIndex)
	}
	got, qm, err := vars.Read(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got.Items, api.VariableItems{"k": "2"}) || qm.LastIndex != got.ModifyIndex {
		t.Errorf("read %+v at index %d", got, qm.LastIndex)
	}
	if _, _, err := vars.Create(&api.Variable{Path: "conf-vars/b", Items: api.VariableItems{"k": "b"}}, nil); err != nil {
		t.Fatal(err)
	}
	ls, _, err := vars.PrefixList("conf-vars/", nil)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, m := range ls {
		paths = append(paths, m.Path)
	}
	if !slices.Equal(paths, []string{"conf-vars/a", "conf-vars/b"}) {
		t.Errorf("prefix list: %q", paths)
	}

	_, err = vars.CheckedDelete(path, v2.ModifyIndex, nil)
	if c := casConflict(t, "delete at a stale index", err); c.ModifyIndex != v3.ModifyIndex {
		t.Errorf("conflict answered %+v, want the current variable", c)
	}
	if _, err := vars.CheckedDelete(path, v3.ModifyIndex, nil); err != nil {
		t.Fatalf("delete at the variable's index: %v", err)
	}
	if _, _, err := vars.Read(path, nil); !errors.Is(err, api.ErrVariablePathNotFound) {
		t.Errorf("read after delete: %v, want not found", err)
	}
	if _, err := vars.CheckedDelete(path, 0, nil); err != nil {
		t.Errorf("create-only delete of an absent variable: %v, want success", err)
	}
	if _, err := vars.Delete(path, nil); err != nil {
		t.Errorf("delete of an absent variable: %v, want success", err)
	}
}

// VariablesValidation: items are required and 64 KiB at most; paths
// match ^[a-zA-Z0-9-_~/]{1,128}$. Each refusal is HTTP 400.
func VariablesValidation(t *testing.T, tg *Target) {
	vars := tg.Client.Variables()
	_, _, err := vars.Create(&api.Variable{Path: "conf-valid/empty"}, nil)
	wantErr(t, "no items", err, http.StatusBadRequest, "variable missing required Items object")
	_, _, err = vars.Create(&api.Variable{Path: "conf-valid/big", Items: api.VariableItems{"k": strings.Repeat("x", 65537)}}, nil)
	wantErr(t, "items over 64 KiB", err, http.StatusBadRequest, "variables are limited to 64KiB in total size")
	r := tg.raw(t, http.MethodPut, "/v1/var/conf-valid/a.b", `{"Items":{"k":"v"}}`)
	if r.code != http.StatusBadRequest || !strings.Contains(r.body, "invalid path") {
		t.Errorf("PUT of path conf-valid/a.b: %d %q, want 400 invalid path", r.code, r.body)
	}
	for _, p := range []string{"conf-valid/empty", "conf-valid/big", "conf-valid/a.b"} {
		if _, _, err := vars.Read(p, nil); !errors.Is(err, api.ErrVariablePathNotFound) {
			t.Errorf("refused %s was stored: %v", p, err)
		}
	}
}

// VariableLocks: lock-acquire (TTL and LockDelay 15s by default, TTL 10s
// to 24h) overwrites the items; another holder's acquire, a renewal or
// release with a wrong ID, and a write or delete without the lock's ID
// answer 409; the holder renews and releases.
func VariableLocks(t *testing.T, tg *Target) {
	vars := tg.Client.Variables()
	const path = "conf-lock/a"
	if _, _, err := vars.Create(&api.Variable{Path: path, Items: api.VariableItems{"old": "1"}}, nil); err != nil {
		t.Fatal(err)
	}
	v, _, err := vars.AcquireLock(&api.Variable{Path: path, Items: api.VariableItems{"new": "1"}}, nil)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if v.Lock == nil || v.Lock.ID == "" {
		t.Fatalf("acquire answered %+v, want a lock ID", v)
	}
	id := v.Lock.ID
	t.Cleanup(func() {
		_, _, _ = vars.ReleaseLock(&api.Variable{Path: path, Lock: &api.VariableLock{ID: id}}, nil)
		_, _ = vars.Delete(path, nil)
	})
	if v.Lock.TTL != "15s" || v.Lock.LockDelay != "15s" {
		t.Errorf("lock TTL %q, LockDelay %q; want 15s, 15s", v.Lock.TTL, v.Lock.LockDelay)
	}
	got, _, err := vars.Read(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got.Items, api.VariableItems{"new": "1"}) || got.Lock == nil || got.Lock.ID != id {
		t.Errorf("after acquire: items %v, lock %+v; want the acquire's items and lock %s", got.Items, got.Lock, id)
	}

	conflict := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: no error, want 409", what)
			return
		}
		var c api.ErrCASConflict
		if !errors.As(err, &c) && statusOf(err) != http.StatusConflict {
			t.Errorf("%s: %v, want 409", what, err)
		}
	}
	other := "11111111-1111-4111-8111-111111111111"
	_, _, err = vars.AcquireLock(&api.Variable{Path: path, Items: api.VariableItems{"x": "1"}, Lock: &api.VariableLock{ID: other}}, nil)
	conflict("another holder's acquire", err)
	_, _, err = vars.Update(&api.Variable{Path: path, Items: api.VariableItems{"x": "1"}}, nil)
	conflict("a write without the lock ID", err)
	_, err = vars.Delete(path, nil)
	conflict("a delete of the locked variable", err)
	_, _, err = vars.RenewLock(&api.Variable{Path: path, Lock: &api.VariableLock{ID: other}}, nil)
	conflict("a renewal with a wrong ID", err)
	_, _, err = vars.ReleaseLock(&api.Variable{Path: path, Lock: &api.VariableLock{ID: other}}, nil)
	conflict("a release with a wrong ID", err)

	if _, _, err := vars.Update(&api.Variable{Path: path, Items: api.VariableItems{"held": "1"}, Lock: &api.VariableLock{ID: id}}, nil); err != nil {
		t.Errorf("the holder's write: %v", err)
	}
	if _, _, err := vars.RenewLock(&api.Variable{Path: path, Lock: &api.VariableLock{ID: id}}, nil); err != nil {
		t.Errorf("the holder's renewal: %v", err)
	}
	if _, _, err := vars.ReleaseLock(&api.Variable{Path: path, Lock: &api.VariableLock{ID: id}}, nil); err != nil {
		t.Fatalf("the holder's release: %v", err)
	}
	got, _, err = vars.Read(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Lock != nil || !maps.Equal(got.Items, api.VariableItems{"held": "1"}) {
		t.Errorf("after release: lock %+v items %v; want no lock, the holder's items", got.Lock, got.Items)
	}

	_, _, err = vars.AcquireLock(&api.Variable{Path: "conf-lock/short", Items: api.VariableItems{"k": "v"}, Lock: &api.VariableLock{TTL: "5s"}}, nil)
	wantErr(t, "a 5s TTL", err, http.StatusBadRequest)
}

// VariableLockExpiry: a lock not renewed expires 2×TTL after its acquire
// (renewals then fail) and is released LockDelay after that; until then
// nobody else acquires it.
func VariableLockExpiry(t *testing.T, tg *Target) {
	vars := tg.Client.Variables()
	const path = "conf-lock/expiry"
	v, _, err := vars.AcquireLock(&api.Variable{Path: path, Items: api.VariableItems{"k": "v"},
		Lock: &api.VariableLock{TTL: "10s", LockDelay: "20s"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := v.Lock.ID
	other := "22222222-2222-4222-8222-222222222222"
	t.Cleanup(func() {
		for _, l := range []string{id, other} {
			_, _, _ = vars.ReleaseLock(&api.Variable{Path: path, Lock: &api.VariableLock{ID: l}}, nil)
		}
		_, _ = vars.Delete(path, nil)
	})
	tg.Advance(t, 25*time.Second)
	_, _, err = vars.RenewLock(&api.Variable{Path: path, Lock: &api.VariableLock{ID: id}}, nil)
	if err == nil {
		t.Errorf("renewal 25s after acquiring a 10s-TTL lock succeeded, want it refused")
	}
	_, _, err = vars.AcquireLock(&api.Variable{Path: path, Items: api.VariableItems{"k": "w"}, Lock: &api.VariableLock{ID: other}}, nil)
	if err == nil {
		t.Errorf("another holder acquired the lock within its 20s lock delay")
	}
	tg.Advance(t, 20*time.Second)
	eventually(t, "the lock released after its delay", func() (bool, string) {
		_, _, err := vars.AcquireLock(&api.Variable{Path: path, Items: api.VariableItems{"k": "w"}, Lock: &api.VariableLock{ID: other}}, nil)
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// VariableBlockingRead: a blocking read of one variable at its
// ModifyIndex answers its next version once written, with that version's
// ModifyIndex as X-Nomad-Index; a blocking read at that index answers
// 404 once the variable is deleted, with an index above the one it waited
// on. (The device plugin's power caps watch their variables so.)
func VariableBlockingRead(t *testing.T, tg *Target) {
	vars := tg.Client.Variables()
	const path = "conf-vwatch/v"
	v, _, err := vars.Create(&api.Variable{Path: path, Items: api.VariableItems{"k": "1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = vars.Delete(path, nil) })

	type answer struct {
		v   *api.Variable
		idx uint64
		err error
	}
	read := func(idx uint64) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			got, qm, err := vars.Peek(path, &api.QueryOptions{WaitIndex: idx, WaitTime: 5 * time.Minute})
			var at uint64
			if qm != nil {
				at = qm.LastIndex
			}
			ch <- answer{got, at, err}
		}()
		return ch
	}
	wait := func(what string, ch <-chan answer) answer {
		t.Helper()
		select {
		case a := <-ch:
			if a.err != nil {
				t.Fatalf("%s: %v", what, a.err)
			}
			return a
		case <-time.After(Deadline):
			t.Fatalf("%s: no answer within %s", what, Deadline)
			return answer{}
		}
	}

	pending := read(v.ModifyIndex)
	w, _, err := vars.Update(&api.Variable{Path: path, Items: api.VariableItems{"k": "2"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := wait("a blocking read across a write", pending)
	if a.v == nil || a.v.Items["k"] != "2" || a.idx != w.ModifyIndex || a.v.ModifyIndex != w.ModifyIndex {
		t.Fatalf("a blocking read at %d across a write answered %+v at index %d; want items k=2 at the write's index %d", v.ModifyIndex, a.v, a.idx, w.ModifyIndex)
	}

	pending = read(a.idx)
	if _, err := vars.Delete(path, nil); err != nil {
		t.Fatal(err)
	}
	a2 := wait("a blocking read across a delete", pending)
	if a2.v != nil || a2.idx <= a.idx {
		t.Fatalf("a blocking read at %d across a delete answered %+v at index %d; want 404 at a higher index", a.idx, a2.v, a2.idx)
	}
}
