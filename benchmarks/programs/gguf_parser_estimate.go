// gguf-parser-go's own estimate of the device compute buffer, for the rows of
// benchmarks/device_validation.py (its GGUF_PARSER table was made with this program).
//
// It is not built by the tests. To run it: clone github.com/gpustack/gguf-parser-go at
// 8dc7a62 (2026-07-13, its latest release before its issues #40-#52 on device compute
// buffers), copy this file to cmd/vizalloc-estimate/main.go there, then
//
//	go build -tags stdjson -o estimate ./cmd/vizalloc-estimate
//	./estimate MODEL.gguf 37 1      # one line per device for -ngl 37 and for -ngl 1
//
// The settings are the sweep's: -c 4096 -fa on -ctk q8_0 -ctv q8_0 -b 2048 -ub 512 -np 1.
// "sum" is what gguf-parser reports as a device's compute memory (Computation.Sum():
// footprint + input + max(graph, output)); device 1 is the GPU.
package main

import (
	"fmt"
	"os"
	"strconv"

	gp "github.com/gpustack/gguf-parser-go"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: estimate MODEL.gguf N_GPU_LAYERS...")
		os.Exit(2)
	}
	f, err := gp.ParseGGUFFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, a := range os.Args[2:] {
		n, err := strconv.ParseUint(a, 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "N_GPU_LAYERS must be a count:", a)
			os.Exit(2)
		}
		e := f.EstimateLLaMACppRun(
			gp.WithLLaMACppContextSize(4096), gp.WithFlashAttention(),
			gp.WithLLaMACppCacheKeyType(gp.GGMLTypeQ8_0), gp.WithLLaMACppCacheValueType(gp.GGMLTypeQ8_0),
			gp.WithLLaMACppLogicalBatchSize(2048), gp.WithLLaMACppPhysicalBatchSize(512),
			gp.WithParallelSize(1), gp.WithLLaMACppOffloadLayers(n))
		for i, d := range e.Devices {
			c := d.Computation
			fmt.Printf("ngl %d device %d footprint %d input %d graph %d output %d sum %d\n", n, i,
				uint64(c.Footprint), uint64(c.Input), uint64(c.Compute), uint64(c.Output), uint64(c.Sum()))
		}
	}
}
