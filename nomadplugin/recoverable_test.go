package nomadplugin

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/llmgw/llmgw/nomadplugin/pb/structspb"
)

func TestRecoverableError(t *testing.T) {
	for _, want := range []bool{true, false} {
		err := RecoverableError(errors.New("engine port busy"), want)
		st := status.Convert(err)
		if st.Code() != codes.FailedPrecondition || st.Message() != "engine port busy" {
			t.Fatalf("got %v %q", st.Code(), st.Message())
		}
		// The detail must travel under the full name the Nomad client
		// looks for.
		details := st.Proto().GetDetails()
		if len(details) != 1 {
			t.Fatalf("got %d details", len(details))
		}
		if got := details[0].GetTypeUrl(); got != "type.googleapis.com/hashicorp.nomad.plugins.shared.structs.RecoverableError" {
			t.Fatalf("detail type %q", got)
		}
		var re structspb.RecoverableError
		if err := details[0].UnmarshalTo(&re); err != nil {
			t.Fatal(err)
		}
		if re.GetRecoverable() != want {
			t.Fatalf("recoverable = %v, want %v", re.GetRecoverable(), want)
		}
		got, ok := IsRecoverable(err)
		if !ok || got != want {
			t.Fatalf("IsRecoverable = %v, %v; want %v, true", got, ok, want)
		}
	}
	if RecoverableError(nil, true) != nil {
		t.Fatal("nil error must stay nil")
	}
	if _, ok := IsRecoverable(errors.New("plain")); ok {
		t.Fatal("plain error reported as carrying the detail")
	}
}
