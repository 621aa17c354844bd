package facility

import (
	"errors"
	"strconv"
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

// Error is a problem with an input, at a place in a file. Parsers and
// validators return one *Error per problem, joined with errors.Join.
type Error struct {
	Pos Pos
	Msg string
}

func (e *Error) Error() string {
	if s := e.Pos.String(); s != "" {
		return s + ": " + e.Msg
	}
	return e.Msg
}

func errAt(p Pos, msg string) error { return &Error{Pos: p, Msg: msg} }

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
