package routing

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

type msg struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func chatBody(t testing.TB, msgs ...msg) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"model": "m", "messages": msgs, "max_tokens": 8})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// conversation is turns user/assistant pairs after a system prompt: the
// body of its turn n (from 1) holds the first n user messages and the
// n-1 answers between them.
func conversation(system, user string, turn int) []msg {
	var ms []msg
	if system != "" {
		ms = append(ms, msg{"system", system})
	}
	for i := 1; i <= turn; i++ {
		ms = append(ms, msg{"user", fmt.Sprintf("%s turn %d", user, i)})
		if i < turn {
			ms = append(ms, msg{"assistant", fmt.Sprintf("answer %d to %s", i, user)})
		}
	}
	return ms
}

// Every turn of a conversation has the same key, and so do all the
// conversations of a tenant (one system prompt); other tenants have other
// keys; a chat with no system prompt is keyed by its first user turn, so
// by its conversation alone.
func TestPrefixKeyFollowsConversations(t *testing.T) {
	sysA, sysB := strings.Repeat("You are tenant A's assistant. ", 100), strings.Repeat("You are tenant B's assistant. ", 100)
	first := KeyOf("/v1/chat/completions", chatBody(t, conversation(sysA, "alice", 1)...))
	if !first.OK {
		t.Fatalf("first turn: %+v, want a key", first)
	}
	for turn := 2; turn <= 6; turn++ {
		if k := KeyOf("/v1/chat/completions", chatBody(t, conversation(sysA, "alice", turn)...)); k.Shared != first.Shared {
			t.Errorf("turn %d: key %+v, want the first turn's %+v", turn, k, first)
		}
	}
	// The first turn opens a conversation; every later one continues it.
	if first.History || !first.Opens {
		t.Errorf("first turn: %+v, want a new conversation (opens, no history)", first)
	}
	later := KeyOf("/v1/chat/completions", chatBody(t, conversation(sysA, "alice", 2)...))
	if !later.History || later.Opens || later.Shared != first.Shared {
		t.Errorf("second turn: %+v, want the first turn's key with history", later)
	}
	// Cut just after its first user turn, a body may go on: it neither
	// opens nor continues a conversation as far as the key can tell.
	whole := chatBody(t, conversation(sysA, "alice", 2)...)
	cut := whole[:bytes.Index(whole, []byte("alice turn 1"))+len("alice turn 1\"}")]
	if k := KeyOf("/v1/chat/completions", cut); !k.OK || k.History || k.Opens || k.Shared != first.Shared {
		t.Errorf("body cut after the first user turn: %+v, want the conversation's key, neither opening nor continuing", k)
	}
	if bob := KeyOf("/v1/chat/completions", chatBody(t, conversation(sysA, "bob", 3)...)); bob.Shared != first.Shared {
		t.Errorf("same tenant, other user: %+v against %+v: want one key", bob, first)
	}
	if other := KeyOf("/v1/chat/completions", chatBody(t, conversation(sysB, "alice", 1)...)); other.Shared == first.Shared {
		t.Errorf("other tenant: %+v against %+v: want another key", other, first)
	}
	// No system prompt: the first user turn is the key.
	plain := KeyOf("/v1/chat/completions", chatBody(t, conversation("", "carol", 3)...))
	if !plain.OK || plain.Shared == first.Shared {
		t.Errorf("no system prompt: %+v, want a key of its own", plain)
	}
	if k := KeyOf("/v1/chat/completions", chatBody(t, conversation("", "carol", 1)...)); k.Shared != plain.Shared || k.History || !plain.History {
		t.Errorf("no system prompt, turn 1: %+v, want turn 3's key %+v, turn 1 new and turn 3 continuing", k, plain)
	}
	if k := KeyOf("/v1/chat/completions", chatBody(t, conversation("", "dave", 3)...)); k.Shared == plain.Shared {
		t.Errorf("no system prompt, other user: %+v, want a key other than carol's %+v", k, plain)
	}
}

// A prompt of megabytes is keyed by its first keyBytes: bodies that
// differ only past them have the same key, and the key reads no more.
func TestPrefixKeyBoundedBytes(t *testing.T) {
	huge := strings.Repeat("x", 4<<20)
	a := chatBody(t, msg{"system", huge}, msg{"user", "one"})
	b := chatBody(t, msg{"system", huge + "y"}, msg{"user", "two"})
	ka, kb := KeyOf("/v1/chat/completions", a), KeyOf("/v1/chat/completions", b)
	if !ka.OK || ka != kb {
		t.Errorf("4 MiB system prompts differing past the bound: keys %+v and %+v, want equal", ka, kb)
	}
	// Cut at the bound, the key is the same as of the whole body.
	if k := KeyOf("/v1/chat/completions", a[:keyBytes]); k != ka {
		t.Errorf("body cut at keyBytes: %+v, want %+v", k, ka)
	}
	// Completions: the first block.
	p1, _ := json.Marshal(map[string]any{"model": "m", "prompt": strings.Repeat("p", promptBlock) + "first"})
	p2, _ := json.Marshal(map[string]any{"model": "m", "prompt": strings.Repeat("p", promptBlock) + "second, longer"})
	k1, k2 := KeyOf("/v1/completions", p1), KeyOf("/v1/completions", p2)
	if !k1.OK || k1 != k2 {
		t.Errorf("completions sharing the first block: %+v and %+v, want one key", k1, k2)
	}
	short, _ := json.Marshal(map[string]any{"model": "m", "prompt": "short"})
	if k := KeyOf("/v1/completions", short); k.OK {
		t.Errorf("prompt under one block: key %+v, want none", k)
	}
}

// What cannot be read as the model's JSON has no key (the default policy
// routes it).
func TestPrefixKeyUnreadable(t *testing.T) {
	for _, body := range []string{
		``, `not json`, `[1,2]`, `{"model":"m"}`, `{"model":"m","messages":"text"}`, `{"model":"m","messages":[1,2]}`,
		`{"model":"m","messages":[`, `{"model":"m","prompt":["a","b"]}`, `{"model":"m" "messages":[]}`,
	} {
		for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings"} {
			if k := KeyOf(path, []byte(body)); k.OK {
				t.Errorf("%s %q: key %+v, want none", path, body, k)
			}
		}
	}
}

// The key of a chat's fourth turn behind a 4 KB system prompt.
func BenchmarkPrefixKey(b *testing.B) {
	body := chatBody(b, conversation(strings.Repeat("You are a helpful assistant. ", 150), "alice", 4)...)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if k := KeyOf("/v1/chat/completions", body); !k.OK {
			b.Fatal("no key")
		}
	}
}

// Any body: KeyOf does not panic, reads no more than keyBytes (a body
// and its first keyBytes have the same key), and a key is never made of
// nothing.
func FuzzPrefixKey(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}]}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":"a\"b"},{"x":1}],"model":"m"}`))
	f.Add([]byte(`{"model":"m","prompt":"` + strings.Repeat("p", promptBlock+3) + `"}`))
	f.Add([]byte(`{"messages":[{"role":`))
	f.Add([]byte(`{"messages":[{}, {"role":"user"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
			k := KeyOf(path, body)
			if len(body) > keyBytes && KeyOf(path, body[:keyBytes]) != k {
				t.Errorf("%s: the key reads past keyBytes", path)
			}
			if k.OK && len(body) == 0 {
				t.Errorf("%s: a key of an empty body", path)
			}
		}
	})
}
