// Command workload is the container image of the real-node tests' GPU jobs.
//
//	workload [--sleep SECONDS] [--exit CODE] [-- COMMAND ARGS...]
//
// It prints its hostname and its sorted environment, one "env NAME=VALUE" line each, then runs
// COMMAND (if given; its output follows and its exit status is the workload's), then sleeps, and
// exits with CODE. SIGTERM ends the sleep at once.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"syscall"
	"time"
)

func main() {
	sleep := flag.Float64("sleep", 0, "seconds to sleep after printing")
	code := flag.Int("exit", 0, "exit status")
	flag.Parse()
	host, _ := os.Hostname()
	fmt.Printf("hostname %s\n", host)
	env := os.Environ()
	sort.Strings(env)
	for _, kv := range env {
		fmt.Printf("env %s\n", kv)
	}
	status := *code
	if args := flag.Args(); len(args) > 0 {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Printf("command %v: %v\n", args, err)
			if ee, ok := err.(*exec.ExitError); ok {
				status = ee.ExitCode()
			} else {
				status = 127
			}
		}
	}
	if *sleep > 0 {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		select {
		case <-sigs:
		case <-time.After(time.Duration(*sleep * float64(time.Second))):
		}
	}
	os.Exit(status)
}
