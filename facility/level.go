package facility

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Level is a location level of the data centre, coarse to fine.
type Level uint8

// The location levels, coarse to fine. Site, room, row and rack nest (a rack
// lies in one row, a row in one room, a room in one site); a PDU is the finest
// level and may feed nodes of more than one rack.
const (
	LevelSite Level = iota
	LevelRoom
	LevelRow
	LevelRack
	LevelPDU
)

// NumLevels is the number of location levels.
const NumLevels = 5

var levelNames = [NumLevels]string{"site", "room", "row", "rack", "pdu"}

// Levels returns every level, coarse to fine.
func Levels() []Level { return []Level{LevelSite, LevelRoom, LevelRow, LevelRack, LevelPDU} }

// String returns the level's name as written in files and domain keys.
func (l Level) String() string {
	if int(l) < NumLevels {
		return levelNames[l]
	}
	return "level(" + strconv.Itoa(int(l)) + ")"
}

// Valid reports whether l is one of the five levels.
func (l Level) Valid() bool { return int(l) < NumLevels }

// ParseLevel parses "site", "room", "row", "rack" or "pdu".
func ParseLevel(s string) (Level, error) {
	for i, n := range levelNames {
		if s == n {
			return Level(i), nil
		}
	}
	return 0, fmt.Errorf("%w %q (want site, room, row, rack or pdu)", ErrUnknownLevel, s)
}

// Domain is one level and value, such as rack=r01-k01. Values are global: two
// racks with the same name are the same domain.
type Domain struct {
	Level Level
	Value string
}

// String returns the domain key, "level=value".
func (d Domain) String() string { return d.Level.String() + "=" + d.Value }

// ParseDomain parses a domain key such as "rack=r01-k01".
func ParseDomain(s string) (Domain, error) {
	lv, val, ok := strings.Cut(s, "=")
	if !ok {
		return Domain{}, fmt.Errorf("domain %q: want level=value, such as rack=r01-k01", s)
	}
	l, err := ParseLevel(lv)
	if err != nil {
		return Domain{}, fmt.Errorf("domain %q: %w", s, err)
	}
	if err := checkValue(val); err != nil {
		return Domain{}, fmt.Errorf("domain %q: %w", s, err)
	}
	return Domain{Level: l, Value: val}, nil
}

// checkValue reports whether s can be a location value: not empty, and no
// space, control character, '=' or ','.
func checkValue(s string) error {
	if s == "" {
		return fmt.Errorf("empty value")
	}
	for _, r := range s {
		if r == '=' || r == ',' || unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar {
			return fmt.Errorf("value %q: no spaces, control characters, '=' or ','", s)
		}
	}
	return nil
}

// Location is where a node sits. An empty field means the node has no value
// at that level and belongs to no domain of it.
type Location struct {
	Site, Room, Row, Rack, PDU string
}

// Get returns the value at level l.
func (loc Location) Get(l Level) string {
	switch l {
	case LevelSite:
		return loc.Site
	case LevelRoom:
		return loc.Room
	case LevelRow:
		return loc.Row
	case LevelRack:
		return loc.Rack
	case LevelPDU:
		return loc.PDU
	}
	return ""
}

func (loc *Location) set(l Level, v string) {
	switch l {
	case LevelSite:
		loc.Site = v
	case LevelRoom:
		loc.Room = v
	case LevelRow:
		loc.Row = v
	case LevelRack:
		loc.Rack = v
	case LevelPDU:
		loc.PDU = v
	}
}

// Scope is the place a replica was pinned to: one domain per level, coarse to
// fine, down to the level it was pinned at. It is what the controller turns
// into hard constraints on the replica's jobs.
type Scope []Domain

// Key returns the finest domain's key, such as "rack=r01-k01", or "".
func (s Scope) Key() string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1].String()
}

// Get returns the value the scope holds at level l.
func (s Scope) Get(l Level) (string, bool) {
	for _, d := range s {
		if d.Level == l {
			return d.Value, true
		}
	}
	return "", false
}

// MarshalJSON writes the scope as an object from level to value, coarse to
// fine: {"site":"ams1","room":"a","row":"r01","rack":"r01-k01"}.
func (s Scope) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, d := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Quote(d.Level.String()))
		b.WriteByte(':')
		q, err := json.Marshal(d.Value)
		if err != nil {
			return nil, err
		}
		b.Write(q)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads what MarshalJSON writes: an object from level to
// value. The levels come back coarse to fine whatever their order in the
// object; an unknown level or a non-string value is an error.
func (s *Scope) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		*s = nil
		return nil
	}
	var m map[string]string
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("scope: %w", err)
	}
	out := Scope{}
	for _, l := range Levels() {
		if v, ok := m[l.String()]; ok {
			out = append(out, Domain{Level: l, Value: v})
			delete(m, l.String())
		}
	}
	for k := range m {
		return fmt.Errorf("scope: %w %q", ErrUnknownLevel, k)
	}
	*s = out
	return nil
}
