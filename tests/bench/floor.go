package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// The floor: what this machine charges a process that does no work but wake ten times a
// second and make one round trip to another process, as muxd's sampling loop does with
// gpusimd. On a VM a wake-up that crosses to another virtual CPU is charged to the
// process woken (the hypervisor's switch, no steal time reported); measured beside muxd
// it says how much of muxd's figure is the machine's and how much muxd's own.

const (
	floorServeFlag  = "-floor-serve"
	floorClientFlag = "-floor-client"
)

// floorMain runs the floor's server or client when the bench was re-executed as one; it
// reports whether it did.
func floorMain(args []string) bool {
	if len(args) != 2 || (args[0] != floorServeFlag && args[0] != floorClientFlag) {
		return false
	}
	var err error
	if args[0] == floorServeFlag {
		err = floorServe(args[1])
	} else {
		err = floorClient(args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench floor:", err)
		os.Exit(1)
	}
	return true
}

// floorServe echoes every message on every connection to sock.
func floorServe(sock string) error {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			buf := make([]byte, 64)
			for {
				n, err := c.Read(buf)
				if err != nil {
					return
				}
				if _, err := c.Write(buf[:n]); err != nil {
					return
				}
			}
		}()
	}
}

// floorClient sends a message to sock and waits for its echo, ten times a second.
func floorClient(sock string) error {
	var c net.Conn
	var err error
	for range 100 { // the server may still be starting
		if c, err = net.Dial("unix", sock); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	buf := make([]byte, 64)
	for range time.Tick(100 * time.Millisecond) {
		if _, err := c.Write([]byte("stats")); err != nil {
			return err
		}
		if _, err := c.Read(buf); err != nil {
			return err
		}
	}
	return nil
}

// measureFloor runs the floor's server and client (pinned to cpu unless it is negative)
// and returns the client's CPU share over window.
func measureFloor(cpu int, window time.Duration) (float64, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "muxbench-floor-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "s.sock")
	var procs []*exec.Cmd
	defer func() {
		// The client first: killed after its server, it would report the broken pipe.
		for _, p := range slices.Backward(procs) {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	}()
	for _, flag := range []string{floorServeFlag, floorClientFlag} {
		p := exec.Command(self, flag, sock)
		p.Stderr = os.Stderr
		if err := p.Start(); err != nil {
			return 0, err
		}
		procs = append(procs, p)
		if err := pin(p.Process.Pid, cpu); err != nil {
			return 0, err
		}
	}
	time.Sleep(time.Second)
	pct, err := cpuPercent(window, procs[1].Process.Pid)
	if err != nil {
		return 0, err
	}
	return pct[0], nil
}

// pin sets the CPU affinity of every thread of pid (those it starts later inherit it)
// to cpu; a negative cpu leaves it alone.
func pin(pid, cpu int) error {
	if cpu < 0 {
		return nil
	}
	out, err := exec.Command("taskset", "-a", "-p", "-c", strconv.Itoa(cpu), strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pin pid %d to CPU %d: %v: %s", pid, cpu, err, out)
	}
	return nil
}
