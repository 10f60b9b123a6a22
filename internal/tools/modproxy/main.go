// Command modproxy writes the modules of this repository, as they are in the
// checkout, into a directory laid out as a Go module proxy (the GOPROXY
// protocol served from files: <module>/@v/list, <version>.info, .mod and
// .zip), so that a consumer outside the checkout can `go get` them with
// GOPROXY=file://<dir>,<the usual proxy> before they are tagged. .ci/consumer
// runs it for the published modules at the version about to be tagged.
//
//	go run . -version v0.1.0 -out /tmp/proxy ../../.. ../../../redisstore
//
// Each argument is a module's directory. The zip holds the files git lists
// there (tracked, and untracked but not ignored; every file where there is
// no git), less nested modules, as the go command would zip a tagged
// commit. modproxy refuses a module that has no LICENSE file (a zip without
// one is valid, but a module's zip carries only its own directory, so a
// module without its own LICENSE is published unlicensed) and one whose
// go.mod has a replace directive (consumers ignore it, so the module would
// build here and not for them).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

func main() {
	version := flag.String("version", "", "the version to publish every module at, e.g. v0.1.0")
	out := flag.String("out", "", "the proxy directory to write into (created if missing)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: modproxy -version vX.Y.Z -out DIR MODULE_DIR...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *version == "" || *out == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	for _, dir := range flag.Args() {
		path, err := publish(dir, *version, *out)
		if err != nil {
			fmt.Fprintf(os.Stderr, "modproxy: %v\n", err)
			os.Exit(1)
		}
		fmt.Printf("%s@%s\n", path, *version)
	}
}

// publish writes the module in dir at version into the proxy directory out
// and returns its path.
func publish(dir, version, out string) (string, error) {
	if !semverRelease(version) {
		return "", fmt.Errorf("-version %q: want a release version vMAJOR.MINOR.PATCH", version)
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("%s: %w", dir, err)
	}
	mf, err := modfile.Parse(filepath.Join(dir, "go.mod"), gomod, nil)
	if err != nil {
		return "", err
	}
	if mf.Module == nil {
		return "", fmt.Errorf("%s/go.mod: no module line", dir)
	}
	path := mf.Module.Mod.Path
	if len(mf.Replace) > 0 {
		r := mf.Replace[0]
		return "", fmt.Errorf("%s (%s/go.mod): replace %s => %s: a published go.mod must not replace (its consumers ignore replace, so it would build here and not for them); local builds use the repository's go.work", path, dir, r.Old.Path, r.New.Path)
	}
	files, err := moduleFiles(dir)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if !slices.ContainsFunc(files, func(f modzip.File) bool { return f.Path() == "LICENSE" }) {
		return "", fmt.Errorf("%s (%s): no LICENSE file: a module's zip carries only its own directory, so each published module needs its own LICENSE", path, dir)
	}
	m := module.Version{Path: path, Version: version}
	esc, err := module.EscapePath(path)
	if err != nil {
		return "", err
	}
	vdir := filepath.Join(out, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return "", err
	}
	var zbuf bytes.Buffer
	if err := modzip.Create(&zbuf, m, files); err != nil {
		return "", fmt.Errorf("zipping %s: %w", m, err)
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return "", err
	}
	for name, data := range map[string][]byte{
		version + ".zip":  zbuf.Bytes(),
		version + ".mod":  gomod,
		version + ".info": info,
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return path, addToList(filepath.Join(vdir, "list"), version)
}

// addToList adds version to the proxy's list file, once.
func addToList(list, version string) error {
	old, err := os.ReadFile(list)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	versions := strings.Fields(string(old))
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	return os.WriteFile(list, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}

// moduleFiles lists the files of the module in dir, relative to dir: the
// files git lists there (tracked, and untracked but not ignored), or every
// regular file where dir is not in a git checkout. modzip.Create leaves out
// nested modules and vendor directories.
func moduleFiles(dir string) ([]modzip.File, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = dir
	listed, err := cmd.Output()
	if err != nil {
		return walkFiles(dir)
	}
	var files []modzip.File
	seen := map[string]bool{}
	for rel := range strings.SplitSeq(strings.TrimSuffix(string(listed), "\x00"), "\x00") {
		if rel == "" || seen[rel] {
			continue // a file with a merge conflict is listed once per stage
		}
		seen[rel] = true
		full := filepath.Join(dir, filepath.FromSlash(rel))
		fi, err := os.Lstat(full)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the checkout, not yet in a commit
		}
		if err != nil {
			return nil, err
		}
		files = append(files, file{rel: rel, full: full, fi: fi})
	}
	return files, nil
}

func walkFiles(dir string) ([]modzip.File, error) {
	var files []modzip.File
	err := filepath.Walk(dir, func(full string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, full)
		if err != nil {
			return err
		}
		files = append(files, file{rel: filepath.ToSlash(rel), full: full, fi: fi})
		return nil
	})
	return files, err
}

// file is one file of a module on disk, as modzip.Create reads it.
type file struct {
	rel, full string
	fi        os.FileInfo
}

func (f file) Path() string                 { return f.rel }
func (f file) Lstat() (os.FileInfo, error)  { return f.fi, nil }
func (f file) Open() (io.ReadCloser, error) { return os.Open(f.full) }

// semverRelease reports whether v is vMAJOR.MINOR.PATCH, the only form
// modproxy publishes (a pseudo-version or a pre-release would say something
// the repository does not mean).
func semverRelease(v string) bool {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if !strings.HasPrefix(v, "v") || len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" || (len(p) > 1 && p[0] == '0') {
			return false
		}
	}
	return true
}
