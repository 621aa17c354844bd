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

// Key is what the prefix policy routes a request by: two hashes of its
// prompt's first blocks, computed from the body alone so that every
// gateway derives the same. Conv is the conversation's (the system prompt
// and the first user turn, which every later turn repeats): it orders the
// replicas for the request, so every turn of a conversation has one first
// choice. Shared is the prefix that conversations share (a chat's system
// prompt, a completion prompt's first block): it weighs that order
// towards the replicas the prefix favours (locality), so that a tenant's
// conversations meet where its system prompt is. A request with no system
// prompt has Shared == Conv.
//
// History is set when the request continues a conversation: a message
// follows its first user turn (an answer and a later turn), so the replica
// that served the earlier turns holds a history that any other would have
// to compute again. Such a request is bounded by the history load factor.
// Opens is set when it opens one: a chat whose messages end with the first
// user turn. Such a request may wait for its replica (the opening wait).
type Key struct {
	Shared, Conv   uint64
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
				h := xxhash.Sum64(buf[i:])
				return Key{Shared: h, Conv: h, OK: true}
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
			k = Key{Shared: h, Conv: h, OK: true}
		} else if user {
			k.Conv = h
		}
		if user {
			// The first user turn (with no system prompt it is both
			// parts); a message after it continues the conversation.
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
	h := xxhash.Sum64(block)
	return Key{Shared: h, Conv: h, OK: true}
}
