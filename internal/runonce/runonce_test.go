package runonce

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestDo: 10 callers at once run f once and all get its result; a caller
// whose ctx ends while f runs gets ctx's error and f goes on; a caller after
// f returned gets the result even with a ctx already ended.
func TestDo(t *testing.T) {
	var c Call[int]
	if c.Started() {
		t.Fatal("a zero Call says it started")
	}
	release := make(chan struct{})
	runs := 0
	f := func() (int, error) {
		runs++
		<-release
		return 42, errors.New("the first's error")
	}
	var wg sync.WaitGroup
	results := make(chan int, 10)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err, ok := c.Do(context.Background(), f)
			if !ok || err == nil || err.Error() != "the first's error" {
				t.Errorf("Do: %d %v %v", v, err, ok)
			}
			results <- v
		}()
	}
	for !c.Started() {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if v, err, ok := c.Do(ctx, f); ok || !errors.Is(err, context.DeadlineExceeded) || v != 0 {
		t.Errorf("a waiter whose ctx ended: %d %v %v; want 0, DeadlineExceeded, false", v, err, ok)
	}
	close(release)
	wg.Wait()
	close(results)
	for v := range results {
		if v != 42 {
			t.Errorf("a caller got %d, want 42", v)
		}
	}
	ended, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if v, _, ok := c.Do(ended, f); !ok || v != 42 || runs != 1 {
		t.Errorf("after the run, with an ended ctx: %d %v, f ran %d times; want 42, true, once", v, ok, runs)
	}
}
