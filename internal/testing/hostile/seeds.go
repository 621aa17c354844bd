package hostile

import "strings"

// HCLSeeds are fuzz seeds of the shapes that overflowed HCL's parsers, or
// would: deep brackets, braces, parentheses, templates, heredocs, unary
// operators and conditionals, each a few hundred thousand levels, and a
// flat value of several megabytes. Every fuzz target over an HCL reader
// adds them (docs/reliability.md, "Hostile input").
func HCLSeeds() [][]byte {
	const n = 100_000
	return [][]byte{
		[]byte("a = " + strings.Repeat("[", n) + "\n"),
		[]byte("a = " + strings.Repeat("{b=", n) + "\n"),
		[]byte("a = " + strings.Repeat("(", n) + "\n"),
		[]byte("a = " + strings.Repeat(`"${`, n) + "\n"),
		[]byte("a = <<EOT\n" + strings.Repeat("${<<EOT\n", n) + "\n"),
		[]byte("a = " + strings.Repeat("!", n) + "true\n"),
		[]byte("a = " + strings.Repeat("-", n) + "1\n"),
		[]byte("a = " + strings.Repeat("x ? 1 : ", n) + "2\n"),
		[]byte(strings.Repeat("b {\n", n)),
		[]byte("a = \"" + strings.Repeat("x", 8<<20) + "\"\n"),
	}
}

// JSONSeeds are the same for JSON inputs: deep arrays and objects, and a
// flat string of several megabytes.
func JSONSeeds() [][]byte {
	const n = 100_000
	return [][]byte{
		[]byte(`{"a":` + strings.Repeat("[", n)),
		[]byte(strings.Repeat(`{"a":`, n)),
		[]byte(`{"a":"` + strings.Repeat("x", 8<<20) + `"}`),
	}
}
