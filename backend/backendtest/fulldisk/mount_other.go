//go:build !linux

package fulldisk

func mount(string, int) error { return errNotLinux }

func unmount(string) error { return nil }
