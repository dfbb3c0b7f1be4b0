// Command kedaload polls an external scaler the way KEDA does, for benchmarks/rpc_load.py.
//
// Every ScaledObject is polled once a second from a random phase (its own goroutine): GetMetrics,
// then IsActive, over one shared connection, each with a 5 s deadline. Requests are read
// pre-serialized from -requests (per ScaledObject: a 4-byte big-endian length and a
// GetMetricsRequest, then the same for its ScaledObjectRef) and sent as raw bytes, so the client
// spends its CPU on gRPC alone: it shares the machine with the scaler it measures. Latency is taken
// per RPC from the moment it is issued (a late poll is not hidden behind a busy worker: each
// ScaledObject has its own goroutine). Output (-out): JSON with the latencies in the measured window
// (milliseconds, per method), the error count and the client's own CPU seconds in that window.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// rawCodec sends and receives message bytes as they are (requests are serialized beforehand).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append((*(v.(*[]byte)))[:0], data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

type poll struct{ getMetrics, isActive []byte }

func readRequests(path string) ([]poll, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []poll
	next := func() ([]byte, error) {
		if len(data) < 4 {
			return nil, fmt.Errorf("truncated requests file")
		}
		n := int(binary.BigEndian.Uint32(data))
		if len(data) < 4+n {
			return nil, fmt.Errorf("truncated requests file")
		}
		msg := data[4 : 4+n]
		data = data[4+n:]
		return msg, nil
	}
	for len(data) > 0 {
		gm, err := next()
		if err != nil {
			return nil, err
		}
		ia, err := next()
		if err != nil {
			return nil, err
		}
		out = append(out, poll{gm, ia})
	}
	return out, nil
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

type result struct {
	GetMetricsMs []float64 `json:"GetMetrics"`
	IsActiveMs   []float64 `json:"IsActive"`
	Errors       int       `json:"errors"`
	ErrorSamples []string  `json:"error_samples"`
	CPUSeconds   float64   `json:"client_cpu_seconds"`
	Seconds      float64   `json:"measured_seconds"`
	Polls        int       `json:"polls"`
}

func main() {
	addr := flag.String("addr", "", "host:port of the scaler")
	requests := flag.String("requests", "", "pre-serialized requests (see the package doc)")
	warmup := flag.Duration("warmup", 10*time.Second, "load before measuring")
	duration := flag.Duration("duration", 30*time.Second, "measured window")
	interval := flag.Duration("interval", time.Second, "polling interval per ScaledObject")
	out := flag.String("out", "", "result JSON (default stdout)")
	flag.Parse()
	polls, err := readRequests(*requests)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer conn.Close()

	start := time.Now().Add(200 * time.Millisecond)
	measure := start.Add(*warmup)
	end := measure.Add(*duration)
	var (
		mu  sync.Mutex
		res result
		wg  sync.WaitGroup
	)
	for _, p := range polls {
		wg.Add(1)
		go func(p poll) {
			defer wg.Done()
			var gm, ia []float64
			errs := 0
			var samples []string
			reply := make([]byte, 0, 64)
			next := start.Add(time.Duration(rand.Float64() * float64(*interval)))
			for {
				time.Sleep(time.Until(next))
				if !next.Before(end) {
					break
				}
				measuring := !next.Before(measure)
				for i, method := range []string{"GetMetrics", "IsActive"} {
					req := p.getMetrics
					if i == 1 {
						req = p.isActive
					}
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					t0 := time.Now()
					err := conn.Invoke(ctx, "/externalscaler.ExternalScaler/"+method, &req, &reply)
					ms := float64(time.Since(t0).Nanoseconds()) / 1e6
					cancel()
					if !measuring {
						continue
					}
					if err != nil {
						errs++
						if len(samples) < 3 {
							samples = append(samples, err.Error())
						}
						continue
					}
					if i == 0 {
						gm = append(gm, ms)
					} else {
						ia = append(ia, ms)
					}
				}
				next = next.Add(*interval)
				if now := time.Now(); next.Before(now) {
					next = now // late: poll again at once, never in a burst
				}
			}
			mu.Lock()
			res.GetMetricsMs = append(res.GetMetricsMs, gm...)
			res.IsActiveMs = append(res.IsActiveMs, ia...)
			res.Errors += errs
			if len(res.ErrorSamples) < 5 {
				res.ErrorSamples = append(res.ErrorSamples, samples...)
			}
			mu.Unlock()
		}(p)
	}
	time.Sleep(time.Until(measure))
	cpu0 := cpuSeconds()
	time.Sleep(time.Until(end))
	res.CPUSeconds = cpuSeconds() - cpu0
	res.Seconds = duration.Seconds()
	res.Polls = len(polls)
	wg.Wait()
	w := os.Stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		defer f.Close()
		w = f
	}
	if err := json.NewEncoder(w).Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
