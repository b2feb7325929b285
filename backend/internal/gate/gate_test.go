package gate

import (
	"errors"
	"testing"
	"time"

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

func TestHold(t *testing.T) {
	g := New()
	if err := g.Enter(); err != nil {
		t.Fatal(err)
	}
	// Hold waits for the call inside to leave, and admits none while fn
	// runs.
	inFn := make(chan struct{})
	release := make(chan struct{})
	held := make(chan error)
	go func() {
		held <- g.Hold(func() { close(inFn); <-release })
	}()
	select {
	case <-inFn:
		t.Fatal("Hold ran fn while a call was inside")
	case <-time.After(20 * time.Millisecond):
	}
	g.Leave()
	<-inFn
	entered := make(chan error)
	go func() { entered <- g.Enter() }()
	select {
	case <-entered:
		t.Fatal("Enter admitted a call while Hold's fn ran")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("Hold = %v", err)
	}
	if err := <-entered; err != nil {
		t.Fatalf("Enter after Hold = %v", err)
	}
	g.Leave()
	g.Close()
	if err := g.Hold(func() { t.Error("Hold ran fn after Close") }); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Hold after Close = %v, want ErrClosed", err)
	}
}
