package web

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsLinkOnlyInsideTheRepository: the README and every page of docs/ link only to files
// that exist in the repository (people who clone it have nothing beside it), every picture they
// show is there, and the docs have the pages the README promises.
func TestDocsLinkOnlyInsideTheRepository(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(pages) < 5 {
		t.Fatalf("docs pages %v (%v)", pages, err)
	}
	for _, want := range []string{"architecture.md", "console.md", "configuration.md", "api.md"} {
		if _, err := os.Stat(filepath.Join(root, "docs", want)); err != nil {
			t.Errorf("docs/%s: %v", want, err)
		}
	}
	link := regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	for _, page := range append(pages, filepath.Join(root, "README.md")) {
		body, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, page)
		for _, m := range link.FindAllStringSubmatch(string(body), -1) {
			target := m[1]
			if strings.HasPrefix(target, "#") {
				continue
			}
			if strings.Contains(target, "://") || strings.HasPrefix(target, "/") || strings.Contains(target, "shared/") {
				t.Errorf("%s links outside the repository: %s", rel, target)
				continue
			}
			file, _, _ := strings.Cut(target, "#")
			abs := filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
			if r, err := filepath.Rel(root, abs); err != nil || strings.HasPrefix(r, "..") {
				t.Errorf("%s links above the repository: %s", rel, target)
				continue
			}
			if _, err := os.Stat(abs); err != nil {
				t.Errorf("%s links to a missing file: %s", rel, target)
			}
		}
	}
}
