package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// proc is one process the test started. It is stopped (SIGTERM, then
// SIGKILL after 10 s) when the test ends, and its output is kept in a log
// file that a failing test prints.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// start runs bin with args and env (added to a minimal environment).
func start(t *testing.T, name, bin string, args []string, env []string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			p.dump(t)
		}
	})
	return p
}

// stop ends the process: SIGTERM, then SIGKILL after 10 s.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// kill ends the process at once (SIGKILL), as a crash would.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) dump(t *testing.T) {
	b, _ := os.ReadFile(p.log)
	const max = 8000
	if len(b) > max {
		b = append([]byte("...\n"), b[len(b)-max:]...)
	}
	t.Logf("--- %s log (%s) ---\n%s", p.name, p.log, b)
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitTCP waits until addr accepts connections or p exits.
func waitTCP(t *testing.T, p *proc, addr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if p.exited() {
			t.Fatalf("%s exited before listening on %s: %v", p.name, addr, p.err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not listening on %s after %s", p.name, addr, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// containerEnv resolves a container's environment as a kubelet would:
// literal values, the pod's own fields (downward API) and Secret keys.
// This is the part of a kubelet the test plays.
func containerEnv(ctx context.Context, c client.Client, pod *corev1.Pod, ctr *corev1.Container) ([]string, error) {
	var out []string
	for _, e := range ctr.Env {
		v := e.Value
		if src := e.ValueFrom; src != nil {
			switch {
			case src.FieldRef != nil:
				switch src.FieldRef.FieldPath {
				case "metadata.name":
					v = pod.Name
				case "metadata.namespace":
					v = pod.Namespace
				default:
					return nil, fmt.Errorf("env %s: field %s not supported by the test's kubelet", e.Name, src.FieldRef.FieldPath)
				}
			case src.ResourceFieldRef != nil:
				cpus, err := cpuLimit(pod, ctr, src.ResourceFieldRef)
				if err != nil {
					return nil, fmt.Errorf("env %s: %w", e.Name, err)
				}
				v = strconv.FormatInt(cpus, 10)
			case src.SecretKeyRef != nil:
				var s corev1.Secret
				if err := c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: src.SecretKeyRef.Name}, &s); err != nil {
					return nil, fmt.Errorf("env %s: %w", e.Name, err)
				}
				b, ok := s.Data[src.SecretKeyRef.Key]
				if !ok {
					return nil, fmt.Errorf("env %s: Secret %s has no key %s", e.Name, s.Name, src.SecretKeyRef.Key)
				}
				v = string(b)
			default:
				return nil, fmt.Errorf("env %s: source not supported by the test's kubelet", e.Name)
			}
		}
		out = append(out, e.Name+"="+v)
	}
	return out, nil
}

// cpuLimit resolves a resourceFieldRef to limits.cpu with divisor 1 as
// the kubelet does: the named container's CPU limit rounded up to whole
// cores, or the machine's CPUs when it has none (the kubelet's node
// allocatable).
func cpuLimit(pod *corev1.Pod, ctr *corev1.Container, ref *corev1.ResourceFieldSelector) (int64, error) {
	if ref.Resource != "limits.cpu" || (!ref.Divisor.IsZero() && ref.Divisor.Cmp(resource.MustParse("1")) != 0) {
		return 0, fmt.Errorf("resource %s with divisor %s not supported by the test's kubelet", ref.Resource, ref.Divisor.String())
	}
	target := ctr
	if ref.ContainerName != "" && ref.ContainerName != ctr.Name {
		target = nil
		for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
			for i := range list {
				if list[i].Name == ref.ContainerName {
					target = &list[i]
				}
			}
		}
		if target == nil {
			return 0, fmt.Errorf("no container %s", ref.ContainerName)
		}
	}
	limit, ok := target.Resources.Limits[corev1.ResourceCPU]
	if !ok {
		return int64(runtime.NumCPU()), nil
	}
	return (limit.MilliValue() + 999) / 1000, nil
}

// rewriteArgs replaces the values of the named --flag=value arguments,
// and fails if one of them is absent: the test only rewrites what the
// injected or rendered spec really has.
func rewriteArgs(t *testing.T, args []string, repl map[string]string) []string {
	t.Helper()
	out := make([]string, 0, len(args))
	seen := map[string]bool{}
	for _, a := range args {
		name, _, ok := strings.Cut(a, "=")
		if v, hit := repl[name]; ok && hit {
			seen[name] = true
			if v != "" {
				out = append(out, name+"="+v)
			}
			continue
		}
		out = append(out, a)
	}
	for name := range repl {
		if !seen[name] {
			t.Fatalf("argument %s not found in %q", name, args)
		}
	}
	return out
}

func TestTheTestKubeletResolvesTheCPULimitAsTheKubeletDoes(t *testing.T) {
	limited := func(name, cpu string) corev1.Container {
		c := corev1.Container{Name: name}
		if cpu != "" {
			c.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
		}
		return c
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{limited("tiercache", "500m")},
		Containers:     []corev1.Container{limited("app", "1500m"), limited("free", "")},
	}}
	one := resource.MustParse("1")
	tests := map[string]struct {
		ctr     *corev1.Container
		ref     corev1.ResourceFieldSelector
		want    int64
		refused bool
	}{
		"half a core is one":                            {ctr: &pod.Spec.InitContainers[0], ref: corev1.ResourceFieldSelector{Resource: "limits.cpu", Divisor: one}, want: 1},
		"a core and a half is two":                      {ctr: &pod.Spec.Containers[0], ref: corev1.ResourceFieldSelector{Resource: "limits.cpu"}, want: 2},
		"a named container's limit is its own":          {ctr: &pod.Spec.Containers[0], ref: corev1.ResourceFieldSelector{ContainerName: "tiercache", Resource: "limits.cpu", Divisor: one}, want: 1},
		"no limit is the machine's CPUs":                {ctr: &pod.Spec.Containers[1], ref: corev1.ResourceFieldSelector{Resource: "limits.cpu"}, want: int64(runtime.NumCPU())},
		"a divisor of a millicore is not played":        {ctr: &pod.Spec.Containers[0], ref: corev1.ResourceFieldSelector{Resource: "limits.cpu", Divisor: resource.MustParse("1m")}, refused: true},
		"memory is not played":                          {ctr: &pod.Spec.Containers[0], ref: corev1.ResourceFieldSelector{Resource: "limits.memory"}, refused: true},
		"a container the pod does not have is an error": {ctr: &pod.Spec.Containers[0], ref: corev1.ResourceFieldSelector{ContainerName: "gone", Resource: "limits.cpu"}, refused: true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := cpuLimit(pod, tt.ctr, &tt.ref)
			if (err != nil) != tt.refused || (!tt.refused && got != tt.want) {
				t.Fatalf("cpuLimit = %d, %v; want %d (refused: %v)", got, err, tt.want, tt.refused)
			}
		})
	}
}
