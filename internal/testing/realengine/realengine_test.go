package realengine_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/internal/testing/llamabuild"
	"github.com/llmgw/llmgw/internal/testing/realengine"
	"github.com/llmgw/llmgw/internal/testing/tinymodel"
)

// The script that builds the engine and the package that finds it name the
// same commit.
func TestScriptPinsTheSameCommit(t *testing.T) {
	b, err := os.ReadFile("../../../scripts/llama-server.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nCOMMIT=" + llamabuild.Commit + "\n", "\nLLAMA_VERSION=" + llamabuild.Version + "\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("scripts/llama-server.sh does not set %q", strings.TrimSpace(want))
		}
	}
}

func TestVersion(t *testing.T) {
	realengine.Require(t)
	out, err := exec.Command(llamabuild.Binary(), "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("--version: %v\n%s", err, out)
	}
	if want := "commit " + llamabuild.Commit; !strings.Contains(string(out), want) {
		t.Errorf("--version printed %q, want it to name %q", out, want)
	}
}

type chatAnswer struct {
	Choices []struct {
		Message      struct{ Content string }
		Text         string
		FinishReason string `json:"finish_reason"`
	}
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	SystemFingerprint string `json:"system_fingerprint"`
}

var post = realengine.Post

// The tiny model answers "Hello world!" and stops, whatever it is asked and
// however it samples, in a chat, a stream and a plain completion; a repeated
// prompt is served from the engine's cache and says so.
func TestTinyModelAnswers(t *testing.T) {
	s := realengine.Start(t, realengine.TinyModel(t))
	for _, body := range []string{
		`{"messages":[{"role":"user","content":"Say something."}]}`,
		`{"messages":[{"role":"system","content":"Be terse!"},{"role":"user","content":"What is 2+2?"}],"temperature":1.5,"top_p":0.5,"seed":7}`,
	} {
		code, b := post(t, s.URL+"/v1/chat/completions", body)
		var a chatAnswer
		if err := json.Unmarshal(b, &a); err != nil || code != 200 || len(a.Choices) != 1 {
			t.Fatalf("chat: %d %s (%v)", code, b, err)
		}
		if got := a.Choices[0].Message.Content; got != "Hello world!" || a.Choices[0].FinishReason != "stop" {
			t.Errorf("chat answer %q finish %q, want %q and stop", got, a.Choices[0].FinishReason, "Hello world!")
		}
		if want := "b1-" + llamabuild.Commit; a.SystemFingerprint != want {
			t.Errorf("system_fingerprint %q, want %q", a.SystemFingerprint, want)
		}
	}

	code, b := post(t, s.URL+"/v1/completions", `{"prompt":"Once upon a time","max_tokens":16}`)
	var c chatAnswer
	if err := json.Unmarshal(b, &c); err != nil || code != 200 || len(c.Choices) != 1 {
		t.Fatalf("completion: %d %s (%v)", code, b, err)
	}
	if got := c.Choices[0].Text; got != "Hello world!" {
		t.Errorf("completion %q, want %q", got, "Hello world!")
	}

	resp2, err := realengine.Client.Post(s.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"Stream it."}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	var text strings.Builder
	done := false
	sc := bufio.NewScanner(resp2.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var ch struct {
			Choices []struct{ Delta struct{ Content string } }
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		for _, c := range ch.Choices {
			text.WriteString(c.Delta.Content)
		}
	}
	if text.String() != "Hello world!" || !done {
		t.Errorf("stream said %q (done %v), want %q then [DONE]", text.String(), done, "Hello world!")
	}

	long := `{"messages":[{"role":"user","content":"` + strings.Repeat("The quick brown fox jumps over the lazy dog. ", 30) + `"}]}`
	var first, second chatAnswer
	for _, a := range []*chatAnswer{&first, &second} {
		_, b := post(t, s.URL+"/v1/chat/completions", long)
		if err := json.Unmarshal(b, a); err != nil {
			t.Fatal(err)
		}
	}
	// The first may share its first tokens (BOS, the template's) with an
	// earlier prompt.
	if first.Usage.PromptTokensDetails.CachedTokens > 4 || second.Usage.PromptTokensDetails.CachedTokens < second.Usage.PromptTokens-2 {
		t.Errorf("cached prompt tokens %d then %d of %d, want a few then nearly all",
			first.Usage.PromptTokensDetails.CachedTokens, second.Usage.PromptTokensDetails.CachedTokens, second.Usage.PromptTokens)
	}
}

// A model that names its replica says so.
func TestTinyModelAnswerNamesReplica(t *testing.T) {
	o := tinymodel.Defaults
	o.Answer = "Hello from r2!"
	s := realengine.Start(t, realengine.Model(t, o))
	_, b := post(t, s.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Who are you?"}]}`)
	if !regexp.MustCompile(`"content":"Hello from r2!"`).Match(b) {
		t.Errorf("answer %s, want Hello from r2!", b)
	}
}
