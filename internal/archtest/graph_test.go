package archtest

import (
	"strings"
	"testing"
)

// linkGraph is the import graph of the module's packages and of everything
// they link, non-test code only (go list -deps ./...): each package's
// imports.
type linkGraph map[string][]string

func newLinkGraph(t *testing.T) linkGraph {
	t.Helper()
	g := linkGraph{}
	for _, p := range listDeps(t, "./...") {
		g[p.ImportPath] = p.Imports
	}
	return g
}

// links walks what from links, breadth first, and calls found with every
// package reached and the shortest chain of imports to it (from first, the
// package last). The walk goes on through a package only when through
// says so; found is called for the packages it stops at too.
func (g linkGraph) links(from string, through func(path string) bool, found func(path string, chain []string)) {
	parent := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, imp := range g[p] {
			if _, seen := parent[imp]; seen {
				continue
			}
			parent[imp] = p
			var chain []string
			for q := imp; q != ""; q = parent[q] {
				chain = append(chain, q)
			}
			for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
				chain[i], chain[j] = chain[j], chain[i]
			}
			found(imp, chain)
			if through(imp) {
				queue = append(queue, imp)
			}
		}
	}
}

// chainText writes a chain of imports as "facility → gatewayapi →
// github.com/hashicorp/nomad/api", the module's packages without the
// module's path.
func chainText(chain []string) string {
	short := make([]string, len(chain))
	for i, p := range chain {
		short[i] = strings.TrimPrefix(p, module+"/")
	}
	return strings.Join(short, " → ")
}

// inModule reports whether path is one of the module's packages.
func inModule(path string) bool {
	return path == module || strings.HasPrefix(path, module+"/")
}
