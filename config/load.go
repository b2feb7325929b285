package config

import (
	"crypto/x509"
	"fmt"
	"os"
	"strings"
)

// Load reads the configuration file at path and what it names (see
// ReadReferences), and parses it. See Parse.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(path, data)
	if err != nil {
		return nil, err
	}
	if err := c.ReadReferences(); err != nil {
		return nil, err
	}
	return c, nil
}

// LoadStore reads only the store section of the file at path, checked as
// Parse checks it, and what the section names (see ReadReferences): a
// gateway configuration, whose other sections are left unread, or a file
// holding a store section alone, for a command (such as `sluice rls
// --store`) that takes its rules from elsewhere. A file without a store
// section is an error.
func LoadStore(path string) (Store, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Store{}, err
	}
	s, err := parseStore(path, data)
	if err != nil {
		return Store{}, err
	}
	if err := s.readReferences(); err != nil {
		return Store{}, err
	}
	return s, nil
}

// ReadReferences reads the values c's file names rather than holds, which
// Parse leaves unread: the Redis password from the file password_file
// names (one line; the newline is not part of it) or from the environment
// variable password_env names, and the certificates of tls.ca_file. A
// file or variable that cannot be read, or a CA file holding no PEM
// certificate, is an *Error naming the file, the line and the field. Load
// calls it; a Config from Parse needs it before its store is opened. Once
// it has succeeded, calling it again does nothing.
func (c *Config) ReadReferences() error { return c.Store.readReferences() }

// referenceKind says what a reference names.
type referenceKind int

const (
	passwordFile referenceKind = iota // store.redis.password_file
	passwordEnv                       // store.redis.password_env
	caFile                            // store.redis.tls.ca_file
)

// reference is a value the file names, as Parse found it: the path or the
// variable, and where the file names it, for errors.
type reference struct {
	kind        referenceKind
	name        string
	file, field string
	line        int
}

func (r reference) errorf(format string, args ...any) *Error {
	return &Error{File: r.file, Line: r.line, Field: r.field, Reason: fmt.Sprintf(format, args...)}
}

// readReferences reads what s's section names, in the file's order, and
// forgets the references once read.
func (s *Store) readReferences() error {
	for _, r := range s.refs {
		switch r.kind {
		case passwordFile:
			data, err := os.ReadFile(r.name)
			if err != nil {
				return r.errorf("cannot read the password: %v", err)
			}
			s.Redis.Password = strings.TrimRight(string(data), "\r\n")
		case passwordEnv:
			v, set := os.LookupEnv(r.name)
			if !set {
				return r.errorf("the environment variable %s is not set", r.name)
			}
			s.Redis.Password = v
		case caFile:
			roots, err := readCAFile(r.name)
			if err != nil {
				return r.errorf("%v", err)
			}
			s.Redis.TLS.roots = roots
		}
	}
	s.refs = nil
	return nil
}

// readCAFile reads a PEM file of certificates into a pool.
func readCAFile(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return roots, nil
}
