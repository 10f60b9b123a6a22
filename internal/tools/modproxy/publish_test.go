package main

import (
	"archive/zip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeModule makes a module directory (not in git: every file is zipped)
// from name → content.
func writeModule(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestPublishWritesProxyLayout(t *testing.T) {
	dir := writeModule(t, map[string]string{
		"go.mod":         "module example.com/Upper/m\n\ngo 1.26\n",
		"LICENSE":        "MIT\n",
		"m.go":           "package m\n",
		"sub/go.mod":     "module example.com/Upper/m/sub\n",
		"sub/sub.go":     "package sub\n",
		"inner/inner.go": "package inner\n",
	})
	out := t.TempDir()
	path, err := publish(dir, "v0.1.0", out)
	if err != nil {
		t.Fatal(err)
	}
	if path != "example.com/Upper/m" {
		t.Fatalf("path %q", path)
	}
	vdir := filepath.Join(out, "example.com", "!upper", "m", "@v")
	for _, name := range []string{"list", "v0.1.0.info", "v0.1.0.mod", "v0.1.0.zip"} {
		if _, err := os.Stat(filepath.Join(vdir, name)); err != nil {
			t.Errorf("proxy file missing: %v", err)
		}
	}
	zr, err := zip.OpenReader(filepath.Join(vdir, "v0.1.0.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	want := []string{"example.com/Upper/m@v0.1.0/LICENSE", "example.com/Upper/m@v0.1.0/go.mod", "example.com/Upper/m@v0.1.0/inner/inner.go", "example.com/Upper/m@v0.1.0/m.go"}
	if !slices.Equal(names, want) {
		t.Errorf("zip holds %q, want %q (the nested module left out)", names, want)
	}
	// Publishing again lists the version once.
	if _, err := publish(dir, "v0.1.0", out); err != nil {
		t.Fatal(err)
	}
	list, _ := os.ReadFile(filepath.Join(vdir, "list"))
	if string(list) != "v0.1.0\n" {
		t.Errorf("list %q, want one v0.1.0", list)
	}
}

func TestPublishRefusesModuleWithoutLicense(t *testing.T) {
	dir := writeModule(t, map[string]string{"go.mod": "module example.com/m\n", "m.go": "package m\n"})
	_, err := publish(dir, "v0.1.0", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "no LICENSE file") {
		t.Fatalf("err = %v, want a refusal naming the missing LICENSE", err)
	}
}

func TestPublishRefusesReplace(t *testing.T) {
	dir := writeModule(t, map[string]string{
		"go.mod":  "module example.com/m\n\nrequire example.com/n v0.1.0\n\nreplace example.com/n => ../n\n",
		"LICENSE": "MIT\n",
	})
	_, err := publish(dir, "v0.1.0", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "replace example.com/n => ../n") {
		t.Fatalf("err = %v, want a refusal naming the replace", err)
	}
}

func TestPublishRefusesNonReleaseVersion(t *testing.T) {
	dir := writeModule(t, map[string]string{"go.mod": "module example.com/m\n", "LICENSE": "MIT\n"})
	for _, v := range []string{"0.1.0", "v0.1", "v0.0.0-00010101000000-000000000000", "v01.0.0", "v1.0.0-rc.1"} {
		if _, err := publish(dir, v, t.TempDir()); err == nil || !strings.Contains(err.Error(), "-version") {
			t.Errorf("version %q: err = %v, want a refusal naming -version", v, err)
		}
	}
}
