package facility

import (
	"errors"
	"strconv"

	"github.com/llmgw/llmgw/internal/hcldecode"
)

// Pos names a place in an input file. The zero Pos means "not from a file"
// (values built in code rather than parsed).
type Pos struct {
	Filename string
	Line     int
}

// String returns "file:line", or "" for the zero Pos.
func (p Pos) String() string {
	if p.Filename == "" && p.Line == 0 {
		return ""
	}
	return p.Filename + ":" + strconv.Itoa(p.Line)
}

// errAt is a problem with an input at p: parsers and validators return
// one *hcldecode.Problem per problem, joined with errors.Join.
func errAt(p Pos, msg string) error {
	return &hcldecode.Problem{Filename: p.Filename, Line: p.Line, Msg: msg}
}

// Sentinel errors, for errors.Is.
var (
	// ErrUnknownLevel: a location level other than site, room, row, rack or pdu.
	ErrUnknownLevel = errors.New("unknown level")
	// ErrUnknownNode: a replica or decision names a node the fleet does not have.
	ErrUnknownNode = errors.New("unknown node")
	// ErrNotPlaced: Commit was given a decision that placed nothing.
	ErrNotPlaced = errors.New("decision placed nothing")
	// ErrNoRoom: Commit was given a decision the nodes no longer have room for.
	ErrNoRoom = errors.New("node has no room for shard")
)
