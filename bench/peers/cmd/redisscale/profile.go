package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// Profiles of the replicas' process over every run (-cpuprofile,
// -mutexprofile, -blockprofile), to see where a decision waits.

type profiles struct{ cpu, mutex, block string }

func (pr *profiles) flags() {
	flag.StringVar(&pr.cpu, "cpuprofile", "", "write a CPU profile of all runs to this file")
	flag.StringVar(&pr.mutex, "mutexprofile", "", "write a mutex contention profile of all runs to this file")
	flag.StringVar(&pr.block, "blockprofile", "", "write a blocking profile of all runs to this file")
}

// start turns on the profiles asked for and returns the function that
// writes them.
func (pr *profiles) start() (stop func() error, err error) {
	if pr.mutex != "" {
		runtime.SetMutexProfileFraction(1)
	}
	if pr.block != "" {
		runtime.SetBlockProfileRate(1000) // one sample per µs blocked, about
	}
	var cpu *os.File
	if pr.cpu != "" {
		if cpu, err = os.Create(pr.cpu); err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(cpu); err != nil {
			return nil, err
		}
	}
	return func() error {
		if cpu != nil {
			pprof.StopCPUProfile()
			if err := cpu.Close(); err != nil {
				return err
			}
		}
		for _, w := range []struct{ name, file string }{{"mutex", pr.mutex}, {"block", pr.block}} {
			if w.file == "" {
				continue
			}
			f, err := os.Create(w.file)
			if err != nil {
				return err
			}
			if err := pprof.Lookup(w.name).WriteTo(f, 0); err != nil {
				return fmt.Errorf("%s profile: %w", w.name, err)
			}
			if err := f.Close(); err != nil {
				return err
			}
		}
		return nil
	}, nil
}
