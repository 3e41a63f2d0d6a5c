// gpushare-nvidia-caps runs a command (NVIDIA's device plugin, typically) in a mount namespace of
// its own in which /proc/driver/nvidia-caps/mig-minors exists, as the NVIDIA driver's nvidia-caps
// module lays it out on a MIG-capable host. The project's glue, not NVIDIA's.
//
// NVIDIA's plugin reads that file for every MIG device it builds (internal/mig: the GPU-instance
// and compute-instance capabilities of each device must be listed there, or the plugin does not
// start). There is no NVIDIA driver here: the MIG devices come from the project's
// libnvidia-ml.so.1 (realnode/fakenvml), and nothing provides /proc/driver/nvidia-caps. runc
// refuses a container mount inside /proc, so the file cannot come from the pod spec; this program,
// in a privileged container (NVIDIA's chart makes the plugin privileged whenever a MIG strategy is
// not "none"), mounts a tmpfs over /proc/driver in a new mount namespace, writes the file, and
// execs the command. Nothing leaves the namespace.
//
// The file lists every capability the driver defines, whatever MIG devices exist (as the driver's
// does): "config", "monitor", and for each GPU minor an access file per GPU instance (0..14) and per
// compute instance (0..7) in it, each with a device minor of its own. The device nodes those minors
// name (/dev/nvidia-caps/nvidia-cap<N>) are not created: the plugin passes MIG devices by UUID in
// NVIDIA_VISIBLE_DEVICES (--device-list-strategy=envvar) and no device specs (--pass-device-specs=false).
//
//	gpushare-nvidia-caps [--gpus N] -- nvidia-device-plugin [args...]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

const (
	procDriver = "/proc/driver"
	minorsFile = "nvidia-caps/mig-minors"
	// The driver's limits: GPU instances per GPU and compute instances per GPU instance.
	gpuInstances     = 15
	computeInstances = 8
)

// minors returns the text of mig-minors for GPU minors 0..gpus-1.
func minors(gpus int) string {
	var b strings.Builder
	next := 1
	line := func(format string, args ...any) {
		fmt.Fprintf(&b, format+" %d\n", append(args, next)...)
		next++
	}
	line("config")
	line("monitor")
	for gpu := 0; gpu < gpus; gpu++ {
		for gi := 0; gi < gpuInstances; gi++ {
			line("gpu%d/gi%d/access", gpu, gi)
			for ci := 0; ci < computeInstances; ci++ {
				line("gpu%d/gi%d/ci%d/access", gpu, gi, ci)
			}
		}
	}
	return b.String()
}

func layOut(gpus int) error {
	if err := syscall.Unshare(syscall.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare(CLONE_NEWNS): %w (needs CAP_SYS_ADMIN: a privileged container)", err)
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private in the new namespace: %w", err)
	}
	if err := syscall.Mount("gpushare-nvidia-caps", procDriver, "tmpfs", syscall.MS_NOSUID|syscall.MS_NOEXEC, "mode=0555"); err != nil {
		return fmt.Errorf("mounting a tmpfs on %s: %w", procDriver, err)
	}
	path := filepath.Join(procDriver, minorsFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o555); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(minors(gpus)), 0o444)
}

func main() {
	gpus := flag.Int("gpus", 8, "GPU minors to list (the file lists capabilities, not what exists)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s [--gpus N] -- command [args...]\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 || *gpus < 1 {
		flag.Usage()
		os.Exit(2)
	}
	// The namespace belongs to this thread; execve below runs the command from it.
	runtime.LockOSThread()
	if err := layOut(*gpus); err != nil {
		fmt.Fprintf(os.Stderr, "gpushare-nvidia-caps: %v\n", err)
		os.Exit(1)
	}
	bin, err := exec.LookPath(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpushare-nvidia-caps: %v\n", err)
		os.Exit(127)
	}
	if err := syscall.Exec(bin, args, os.Environ()); err != nil {
		fmt.Fprintf(os.Stderr, "gpushare-nvidia-caps: exec %s: %v\n", bin, err)
		os.Exit(126)
	}
}
