package bolt

import "github.com/sluice-go/sluice/backend/internal/dirlock"

// bbolt locks its file with flock, which keeps out other processes and also
// other descriptors in this process, but only after Options.Timeout and with
// an error that cannot tell the two apart. The open directories of this
// process are therefore also kept here, by resolved path, so that a second
// Store in this process is refused at once and for the right reason.
var opened = dirlock.New("sluice/backend/bolt")
