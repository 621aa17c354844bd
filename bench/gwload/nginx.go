package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// nginxConf is the reverse proxy gwload measures beside the gateway: what
// an operator would put in front of an OpenAI-compatible engine — HTTP/1.1
// to the upstream with kept-alive connections, no access log, responses
// not buffered (so server-sent events stream) — with nothing else on.
// worker_processes auto gives it a worker per CPU, as the gateway gets a
// GOMAXPROCS of one per CPU.
const nginxConf = `worker_processes auto;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  upstream engine {
    server %[2]s;
    keepalive 256;
  }
  server {
    listen %[3]s;
    location / {
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`

// startNginx runs the nginx binary at bin as a reverse proxy to upstream,
// on a loopback port, its files in a temporary directory; on cpus when
// that is not empty.
func startNginx(bin, upstream string, cpus []int) (*server, error) {
	dir, err := os.MkdirTemp("", "gwload-nginx-")
	if err != nil {
		return nil, err
	}
	addr, err := freeLoopbackPort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, dir, upstream, addr), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := startOn(cmd, cpus); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("-nginx %s: %w", bin, err)
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGQUIT) // graceful: workers finish, then exit
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = os.RemoveAll(dir)
	}
	// Ready when it accepts a connection; bounded.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			stop()
			return nil, fmt.Errorf("-nginx %s: not accepting on %s after 10s: %s", bin, addr, strings.TrimSpace(string(log)))
		}
		time.Sleep(20 * time.Millisecond)
	}
	pid := cmd.Process.Pid
	return &server{addr: addr, cpu: func() time.Duration { return treeCPU(pid) }, stop: stop}, nil
}

// freeLoopbackPort is a loopback address no one listens on now (nginx
// binds it itself, so the port is closed again first).
func freeLoopbackPort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return "", err
	}
	return addr, nil
}

// treeCPU is the CPU time of process pid and its children (nginx's master
// and its workers).
func treeCPU(pid int) time.Duration {
	total := processCPU(pid)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return total
	}
	for f := range strings.FieldsSeq(string(b)) {
		if c, err := strconv.Atoi(f); err == nil {
			total += processCPU(c)
		}
	}
	return total
}

// processCPU is the CPU time process pid has used, from the scheduler's
// per-thread accounting (/proc/PID/task/*/schedstat, nanoseconds).
func processCPU(pid int) time.Duration {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var total time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			total += time.Duration(n)
		}
	}
	return total
}
