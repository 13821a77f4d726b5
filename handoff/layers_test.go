package handoff

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"go/types"
	"path"
	"slices"
	"strings"
	"testing"
)

// TestFileLayers checks that the package's files form layers: no file
// refers, through a chain of others, to a name declared in itself (a file
// that uses a name of another is above it). Low files (errors, the wire
// format, conn, path and fd checks) thus never reach up into high ones (the
// Upgrader, the server, Ready). The package is type-checked from its source
// alone (imports are left empty, their errors ignored), so each identifier
// resolves to the file that declares it; -v prints the layers.
func TestFileLayers(t *testing.T) {
	uses, files := fileUses(t)
	floor := map[string]int{}
	var visit func(f string, path []string) int
	visit = func(f string, path []string) int {
		if i := slices.Index(path, f); i >= 0 {
			cycle := append(slices.Clone(path[i:]), f)
			var why []string
			for j := 0; j+1 < len(cycle); j++ {
				why = append(why, cycle[j]+" uses "+strings.Join(uses[cycle[j]][cycle[j+1]], ", ")+" of "+cycle[j+1])
			}
			t.Fatalf("files refer to one another in a loop: %s\n\t%s", strings.Join(cycle, " -> "), strings.Join(why, "\n\t"))
		}
		if n, ok := floor[f]; ok {
			return n
		}
		n := 1
		for g := range uses[f] {
			n = max(n, visit(g, append(path, f))+1)
		}
		floor[f] = n
		return n
	}
	for _, f := range files {
		visit(f, nil)
	}
	if len(files) < 10 {
		t.Fatalf("read %d files (%v): the package was not found whole", len(files), files)
	}
	slices.SortStableFunc(files, func(a, b string) int { return floor[b] - floor[a] })
	for _, f := range files {
		var below []string
		for g := range uses[f] {
			below = append(below, g)
		}
		slices.Sort(below)
		t.Logf("floor %d  %-14s uses %s", floor[f], f, strings.Join(below, " "))
	}
}

// fileUses type-checks the package's non-test Linux files and returns, for
// each file, the files whose package-level names (or methods, or struct
// fields) it uses, with those names.
func fileUses(t *testing.T) (map[string]map[string][]string, []string) {
	t.Helper()
	ctx := build.Default
	ctx.GOOS = "linux"
	pkg, err := ctx.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var syntax []*ast.File
	for _, name := range pkg.GoFiles {
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		syntax = append(syntax, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{
		Importer: importerFunc(func(p string) (*types.Package, error) {
			name := path.Base(p)
			if strings.HasPrefix(name, "v") && strings.Trim(name[1:], "0123456789") == "" {
				name = path.Base(path.Dir(p))
			}
			pk := types.NewPackage(p, name)
			pk.MarkComplete()
			return pk, nil
		}),
		Error: func(error) {}, // what the empty imports leave undefined
	}
	tp, _ := conf.Check("handoff", fset, syntax, info)
	uses := map[string]map[string][]string{}
	for id, obj := range info.Uses {
		if obj == nil || obj.Pkg() != tp || !obj.Pos().IsValid() {
			continue
		}
		from, to := fset.Position(id.Pos()).Filename, fset.Position(obj.Pos()).Filename
		if from == to {
			continue // locals among them
		}
		if uses[from] == nil {
			uses[from] = map[string][]string{}
		}
		if !slices.Contains(uses[from][to], obj.Name()) {
			uses[from][to] = append(uses[from][to], obj.Name())
		}
	}
	for _, m := range uses {
		for _, names := range m {
			slices.Sort(names)
		}
	}
	return uses, pkg.GoFiles
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }
