package envoyrls_test

import "github.com/sluice-go/sluice/envoyrls"

// manyOptions are a server's options taking a request of n descriptors.
func manyOptions(n int) envoyrls.Options {
	return envoyrls.Options{MaxDescriptors: max(n, envoyrls.DefaultMaxDescriptors)}
}
