// Package main runs a small worker pool.
package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

type Job struct {
	ID      int
	Payload string `json:"payload,omitempty"`
}

type Result struct {
	JobID int
	Err   error
}

var ErrEmpty = errors.New("empty payload")

const (
	MaxWorkers = 4
	Timeout    = 2 * time.Second
)

func process(ctx context.Context, j Job) Result {
	select {
	case <-ctx.Done():
		return Result{JobID: j.ID, Err: ctx.Err()}
	default:
	}
	if len(j.Payload) == 0 {
		return Result{j.ID, ErrEmpty}
	}
	return Result{JobID: j.ID}
}

func run(ctx context.Context, jobs []Job) []Result {
	in := make(chan Job)
	out := make(chan Result, len(jobs))
	var wg sync.WaitGroup
	for w := 0; w < MaxWorkers; w++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			for j := range in {
				out <- process(ctx, j)
			}
		}(w)
	}
	for _, j := range jobs {
		in <- j
	}
	close(in)
	wg.Wait()
	close(out)
	results := make([]Result, 0, len(jobs))
	for r := range out {
		results = append(results, r)
	}
	return results
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	jobs := []Job{{1, "a"}, {2, ""}, {ID: 3, Payload: "c"}}
	for _, r := range run(ctx, jobs) {
		if r.Err != nil {
			fmt.Printf("job %d failed: %v\n", r.JobID, r.Err)
			continue
		}
		fmt.Println("job", r.JobID, "ok")
	}
}
