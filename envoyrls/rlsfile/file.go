package rlsfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/sluice-go/sluice/envoyrls"
	"github.com/sluice-go/sluice/internal/configerr"
)

// MaxFileSize bounds a configuration file Load reads: a bigger one is
// refused rather than parsed.
const MaxFileSize = 16 << 20

// ErrNoConfig is wrapped by Load's error for a directory holding no
// *.yaml or *.yml file.
var ErrNoConfig = errors.New("sluice/envoyrls/rlsfile: no configuration file")

// Load reads the configuration at path: a file, or every regular *.yaml
// and *.yml file of a directory and of its subdirectories (names starting
// with "." are skipped, directories included; symbolic links are
// followed), one domain each. Every file is read before any is parsed.
// Errors are *config.Error values naming the file, the line and the field
// at fault, or I/O errors.
func Load(path string) (*envoyrls.Config, error) {
	c, _, err := load(path, envoyrls.LoadOptions{})
	return c, err
}

// LoadWith is Load with options.
func LoadWith(path string, o envoyrls.LoadOptions) (*envoyrls.Config, error) {
	c, _, err := load(path, o)
	return c, err
}

// load is Load that also returns a digest of the file names and contents.
func load(path string, o envoyrls.LoadOptions) (*envoyrls.Config, uint64, error) {
	files, digest, err := readFiles(path)
	if err != nil {
		return nil, 0, err
	}
	c, err := parseFiles(files, o)
	return c, digest, err
}

// file is one configuration file as read: its name and its bytes.
type file struct {
	name string
	data []byte
}

// readFiles reads the files Load reads at path, in order, and returns them
// with a digest of their names and contents. When one cannot be read, the
// error is that of an earlier file that does not parse, if any, as reading
// and parsing them one by one would report it.
func readFiles(path string) ([]file, uint64, error) {
	names, err := configFiles(path)
	if err != nil {
		return nil, 0, err
	}
	files := make([]file, 0, len(names))
	h := xxhash.New()
	for _, name := range names {
		data, err := readFile(name)
		if err != nil {
			for _, f := range files {
				if _, perr := ParseFile(f.name, f.data); perr != nil {
					return nil, 0, perr
				}
			}
			return nil, 0, err
		}
		h.WriteString(name)
		h.Write([]byte{0})
		h.Write(data)
		h.Write([]byte{0})
		files = append(files, file{name, data})
	}
	return files, h.Sum64(), nil
}

// parseFiles parses files, one domain each, into a Config as o says.
func parseFiles(files []file, o envoyrls.LoadOptions) (*envoyrls.Config, error) {
	c, _, err := parseParts(files, o)
	return c, err
}

// part is what one file of a configuration holds, as a reload compares it.
type part struct {
	limits     bool     // a limit of its domain can deny a request
	allowEmpty bool     // it says allow_empty: true
	paths      []string // its limits' paths (Limit.Path), in file order
}

// parseParts is parseFiles that also returns what each file holds, by
// file name.
func parseParts(files []file, o envoyrls.LoadOptions) (*envoyrls.Config, map[string]part, error) {
	domains := make([]*envoyrls.Domain, 0, len(files))
	parts := make(map[string]part, len(files))
	for _, f := range files {
		d, allowEmpty, err := parseFile(f.name, f.data)
		if err != nil {
			return nil, nil, err
		}
		domains = append(domains, d)
		pt := part{limits: enforcing(d) != nil, allowEmpty: allowEmpty}
		for _, l := range d.Limits() {
			pt.paths = append(pt.paths, l.Path)
		}
		parts[f.name] = pt
	}
	c, err := envoyrls.NewConfigWith(o, domains...)
	if err != nil {
		return nil, nil, err
	}
	return c, parts, nil
}

// configFiles lists the files Load reads at path, sorted: the file, or
// every *.yaml and *.yml file under the directory, in its subdirectories
// too, as envoyproxy/ratelimit walks its runtime directory. Names starting
// with a dot are skipped, directories included (a Kubernetes ConfigMap's
// ..data and timestamped directories: its files are linked from the top).
func configFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	var files []string
	err = filepath.WalkDir(path, func(f string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := e.Name()
		if f != path && strings.HasPrefix(name, ".") {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.IsDir() || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			return nil
		}
		if st, err := os.Stat(f); err != nil || !st.Mode().IsRegular() {
			return nil // a dangling link, a directory named *.yaml
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: %s holds no *.yaml or *.yml file", ErrNoConfig, path)
	}
	slices.Sort(files)
	return files, nil
}

// Files returns the files Load reads at path, sorted (see Load).
func Files(path string) ([]string, error) { return configFiles(path) }

// configDirs lists path, when a directory, and its subdirectories but
// those starting with a dot: what a watcher watches.
func configDirs(path string) []string {
	var dirs []string
	filepath.WalkDir(path, func(f string, e fs.DirEntry, err error) error {
		switch {
		case err != nil || !e.IsDir():
			return nil
		case f != path && strings.HasPrefix(e.Name(), "."):
			return filepath.SkipDir
		}
		dirs = append(dirs, f)
		return nil
	})
	return dirs
}

func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, &configerr.Error{File: name, Reason: fmt.Sprintf("larger than %d bytes", MaxFileSize)}
	}
	return data, nil
}
