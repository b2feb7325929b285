package pebble_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/pebble"
)

func ExampleOpen() {
	dir, err := os.MkdirTemp("", "sluice-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	s, err := pebble.Open(filepath.Join(dir, "state"), nil)
	if err != nil {
		log.Fatal(err)
	}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	// Flush two records in one synced batch, as the engine does.
	err = s.WriteBatch([]backend.Write{
		{Key: []byte("api:alice"), Value: []byte{1}, ExpiresAt: now + int64(time.Minute)},
		{Key: []byte("api:bob"), Value: []byte{2}, ExpiresAt: now + int64(time.Second)},
	}, true)
	if err != nil {
		log.Fatal(err)
	}
	s.Close()

	// The records survive a restart, and expire on time.
	s, err = pebble.Open(filepath.Join(dir, "state"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	later := now + int64(2*time.Second)
	alice, _ := s.Get([]byte("api:alice"), later)
	bob, _ := s.Get([]byte("api:bob"), later)
	fmt.Println(alice, bob == nil)
	// Output: [1] true
}
