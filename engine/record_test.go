package engine_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/pebble"
	"github.com/sluice-go/sluice/codec"
	"github.com/sluice-go/sluice/engine"
)

// Record shows the record a decision wrote, over every path (the durable
// tier before any flush included), and nothing for a key unseen or reset.
func TestRecord(t *testing.T) {
	stores := append([]store{}, backends...)
	stores = append(stores, store{"pebble-tier", func(engine.Clock) backend.Backend {
		b, err := pebble.Open(t.TempDir(), &pebble.Options{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}})
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			clock := engine.NewFakeClock(time.Unix(1_700_000_000, 0))
			e := openEngine(t, s.open, clock)
			l := limit(algo.FixedWindowName, algo.Params{Limit: 5, Window: time.Hour}, "orders")
			if rec, err := e.Record(context.Background(), l, "user:a"); rec != nil || err != nil {
				t.Fatalf("Record of an unseen key = %x, %v; want nil", rec, err)
			}
			for range 3 {
				if _, err := e.Apply(context.Background(), l, "user:a", 1); err != nil {
					t.Fatal(err)
				}
			}
			rec, err := e.Record(context.Background(), l, "user:a")
			if err != nil {
				t.Fatal(err)
			}
			w, err := codec.DecodeWindow(rec)
			if err != nil || w.Count != 3 {
				t.Fatalf("Record = %x (%+v, %v), want a fixed window counting 3", rec, w, err)
			}
			again, _ := e.Record(context.Background(), l, "user:a")
			if !bytes.Equal(again, rec) {
				t.Errorf("a second Record = %x, want %x (Record spends nothing)", again, rec)
			}
			if err := e.Reset(context.Background(), l, "user:a"); err != nil {
				t.Fatal(err)
			}
			if rec, err := e.Record(context.Background(), l, "user:a"); rec != nil || err != nil {
				t.Errorf("Record after Reset = %x, %v; want nil", rec, err)
			}
		})
	}
}
