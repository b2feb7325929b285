package replay

import "errors"

// WriteHTML writes the report to dir.
func WriteHTML(dir string, res *Result) error { return errors.New("not yet") }
