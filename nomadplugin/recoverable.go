package nomadplugin

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/llmgw/llmgw/nomadplugin/pb/structspb"
)

// RecoverableError returns a gRPC error the Nomad client understands as
// recoverable (it may retry, for example restart the task) or not: status
// FailedPrecondition with err's message, carrying a
// structspb.RecoverableError detail. Return it from StartTask or TaskStats.
// A nil err gives nil.
func RecoverableError(err error, recoverable bool) error {
	if err == nil {
		return nil
	}
	st := status.New(codes.FailedPrecondition, err.Error())
	withDetail, derr := st.WithDetails(&structspb.RecoverableError{Recoverable: recoverable})
	if derr != nil {
		// The detail is a plain message; marshalling it cannot fail in
		// practice. Keep the code and message if it ever does.
		return st.Err()
	}
	return withDetail.Err()
}

// IsRecoverable reports whether err carries a RecoverableError detail and,
// if so, its value. ok is false for errors without the detail.
func IsRecoverable(err error) (recoverable, ok bool) {
	if err == nil {
		return false, false
	}
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return false, false
	}
	for _, d := range se.GRPCStatus().Details() {
		if re, isRE := d.(*structspb.RecoverableError); isRE {
			return re.GetRecoverable(), true
		}
	}
	return false, false
}
