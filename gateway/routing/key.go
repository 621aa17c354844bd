package routing

import (
	"github.com/cespare/xxhash/v2"

	"github.com/llmgw/llmgw/internal/jsonscan"
)

// Bounds of the prefix key.
const (
	// keyBytes is the most bytes of a request body the prefix key reads:
	// a prompt of megabytes costs no more to key than its first 32 KiB.
	keyBytes = 32 << 10
	// promptBlock is the block of a /v1/completions prompt string: its
	// key is the hash of its first block.
	promptBlock = 1 << 10
)

// Key is what the prefix policy routes a request by: Shared, the hash of
// the prompt's first block that other requests share (a chat's system
// prompt, or its first user turn when it has none; a completion prompt's
// first block), computed from the body alone so that every gateway derives
// the same. It orders the replicas for the request (rank), so all of a
// tenant's conversations, and every turn of each, have one first choice,
// where the system prompt and their histories are, and the same next ones
// when it is over its load bound. A chat with no system prompt is keyed by
// its first user turn: its conversation alone.
//
// History is set when the request continues a conversation: a message
// follows its first user turn (an answer and a later turn), so the replica
// that served the earlier turns holds a history that any other would have
// to compute again. Such a request is bounded by the history load factor.
// Opens is set when it opens one: a chat whose messages end with the first
// user turn. Such a request may wait for its replica (the opening wait).
type Key struct {
	Shared         uint64
	OK             bool // false: nothing to key by, least-outstanding routes it
	History, Opens bool
}

// Key is the request's prefix key (KeyOf).
func (p *Prefix) Key(path string, body []byte) Key { return KeyOf(path, body) }

// KeyOf derives the prefix key of a request body for path from its first
// keyBytes bytes (buf may be a prefix of the body). Anything it cannot read
// as the request's JSON gives no key.
func KeyOf(path string, buf []byte) Key {
	if len(buf) > keyBytes {
		buf = buf[:keyBytes]
	}
	switch path {
	case "/v1/chat/completions":
		return chatKey(buf)
	case "/v1/completions":
		return promptKey(buf)
	}
	return Key{}
}

// chatKey keys a chat by its messages: each whole message is a block,
// hashed cumulatively (its role and its content as the client wrote them).
func chatKey(buf []byte) Key {
	i := jsonscan.Member(buf, "messages")
	if i < 0 || buf[i] != '[' {
		return Key{}
	}
	var k Key
	d := xxhash.New()
	i++
	for n := 0; ; n++ {
		i = jsonscan.SkipSpace(buf, i)
		if i >= len(buf) || buf[i] != '{' {
			break
		}
		end, err := jsonscan.SkipValue(buf, i)
		if err != nil {
			if n == 0 {
				// The first message runs past the bound: what there
				// is of it, as written, is the key.
				return Key{Shared: xxhash.Sum64(buf[i:]), OK: true}
			}
			break
		}
		var role, content []byte
		jsonscan.Members(buf[i:end], func(key []byte, vs, ve int) bool {
			switch string(key) {
			case "role":
				role = buf[i+vs : i+ve]
			case "content":
				content = buf[i+vs : i+ve]
			}
			return true
		})
		_, _ = d.Write(role)
		_, _ = d.Write([]byte{0})
		_, _ = d.Write(content)
		_, _ = d.Write([]byte{0})
		h := d.Sum64()
		user := string(role) == `"user"`
		if n == 0 {
			k = Key{Shared: h, OK: true}
		}
		if user {
			// The first user turn (with no system prompt, the key); a
			// message after it continues the conversation.
			j := jsonscan.SkipSpace(buf, end)
			k.History = j < len(buf) && buf[j] == ','
			k.Opens = j < len(buf) && buf[j] == ']'
			return k
		}
		i = jsonscan.SkipSpace(buf, end)
		if i >= len(buf) || buf[i] != ',' {
			break
		}
		i++
	}
	return k
}

// promptKey keys a completion by its prompt string's first promptBlock
// bytes (as the client wrote them). A shorter prompt, or one that is not a
// string, has no key: there is little prefix to reuse, and a prompt that
// grows would change its key.
func promptKey(buf []byte) Key {
	i := jsonscan.Member(buf, "prompt")
	if i < 0 || buf[i] != '"' || len(buf)-(i+1) < promptBlock {
		return Key{}
	}
	block := buf[i+1 : i+1+promptBlock]
	for _, c := range block {
		if c == '"' || c < 0x20 {
			// The string ends (or is broken) within the block: an
			// escaped quote may be there too, but a short prompt is
			// not worth keying.
			return Key{}
		}
	}
	return Key{Shared: xxhash.Sum64(block), OK: true}
}
