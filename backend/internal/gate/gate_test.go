package gate

import (
	"errors"
	"testing"

	"github.com/sluice-go/sluice/backend"
)

func TestGate(t *testing.T) {
	g := New()
	if err := g.Enter(); err != nil {
		t.Fatalf("Enter on an open gate = %v", err)
	}
	// Close waits for the call inside to leave.
	closed := make(chan bool)
	go func() { closed <- g.Close() }()
	// A background goroutine runs until Stop, and Close waits for it.
	ran := make(chan struct{})
	g.Go(func() { <-g.Stop(); close(ran) })
	g.Leave()
	if !<-closed {
		t.Fatal("first Close = false, want true")
	}
	select {
	case <-ran:
	default:
		t.Fatal("Close returned before the background goroutine")
	}
	if err := g.Enter(); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Enter after Close = %v, want ErrClosed", err)
	}
	if g.Close() {
		t.Error("second Close = true, want false")
	}
}
