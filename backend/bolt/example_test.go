package bolt_test

import (
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/bolt"
)

// One directory holds one Store at a time; expired records read as absent
// at once, and a sweep removes them from the file.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "sluice-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	s, err := bolt.Open(filepath.Join(dir, "state"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	_, err = bolt.Open(filepath.Join(dir, "state"), nil)
	fmt.Println("second Open locked:", errors.Is(err, backend.ErrLocked))

	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	err = s.WriteBatch([]backend.Write{
		{Key: []byte("api:alice"), Value: []byte{1}, ExpiresAt: now + int64(time.Minute)},
		{Key: []byte("api:bob"), Value: []byte{2}, ExpiresAt: now + int64(time.Second)},
	}, true)
	if err != nil {
		log.Fatal(err)
	}
	later := now + int64(2*time.Second)
	removed, err := s.Sweep(later, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("swept:", removed)
	s.Range(nil, func(r backend.Record) bool {
		fmt.Printf("%s = %v\n", r.Key, r.Value)
		return true
	})
	// Output:
	// second Open locked: true
	// swept: 1
	// api:alice = [1]
}
