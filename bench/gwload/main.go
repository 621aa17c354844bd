// Command gwload measures the latency the gateway adds: it starts a
// fake-engine replica and a gateway in front of it, each in its own
// process on loopback (this program run again with -serve), then sends the
// same small chat completion at fixed rates (open loop), straight to the
// replica and through the gateway in alternating slices (direct, gateway,
// gateway, direct, ...), so both see the same machine, and prints the
// latency percentiles of each side by side, the CPU time each process
// spent per request, and the answers per second each target took: past
// what a target can take, -inflight requests wait at once and that is its
// throughput with that many clients (a closed loop). It is bounded: each
// target gets rate×duration requests per rate (-duration at most 30s;
// a target past its capacity takes longer over them), at most -inflight
// outstanding. -keys adds a gateway with API keys and every limit on as
// one more target (what access control adds: "keys added"). The gateway
// is served by gateway.NewFastServer, as the command serves a plaintext
// listener; -minimal adds
// a proxy in Go that does the least a proxy does (minimal.go), and -nginx
// nginx: references for what the gateway's own work costs.
//
//	go run ./bench/gwload -rates 1000,5000 -duration 5s
//	go run ./bench/gwload -rates 1000,5000 -duration 5s -keys
//
// -rounds repeats every rate, each round starting the alternation at
// another place, and ends with a summary: each target's median and range
// over the rounds, and the gateway's ratios to nginx and to minimal-go;
// -single adds one client sending a request at a time. -also adds the
// gateway with keys as another build of this program serves it (one
// built at an earlier commit, say), measured in the same slices with the
// same generator:
//
//	go build -o /tmp/gwload-before ./bench/gwload   # at the earlier commit
//	go run ./bench/gwload -rounds 3 -keys -also before=/tmp/gwload-before
//
// Results are in docs/perf.md ("Gateway", "Gateway: API keys and limits").
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/llmgw/gateway"
	"github.com/llmgw/llmgw/internal/testing/fakeengine"
)

const body = `{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":1}`

func main() {
	rates := flag.String("rates", "1000,5000", "requests per second, comma-separated")
	dur := flag.Duration("duration", 5*time.Second, "length of each measured phase (at most 30s)")
	warm := flag.Duration("warmup", time.Second, "unmeasured load on each target before each rate (at most 5s)")
	slice := flag.Duration("slice", 250*time.Millisecond, "length of one slice of load on one target")
	inflight := flag.Int("inflight", 256, "most requests outstanding at once")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the gateway's process to this file, and of the keyed gateway's (-keys) to this file with .keys added (with -inproc: of this one, generator and engine included)")
	serveRole := flag.String("serve", "", "internal: serve `engine` or `gateway` (to -upstream) on loopback and print the address")
	upstream := flag.String("upstream", "", "internal: the engine's address, for -serve gateway")
	nginx := flag.String("nginx", "", "also measure this nginx binary as a reverse proxy to the same fake-engine (`PATH`, or a name looked up in PATH; its own process, pinned with the gateway under -pin)")
	minimal := flag.Bool("minimal", false, "also measure a minimal Go proxy (`minimal-go`, see minimal.go): what the Go runtime, http.ReadRequest and the sockets cost without the gateway; and `relay-nethttp`, a relay on the gateway's server (net/http) and upstream transport doing nothing else: what net/http's server adds to minimal-go, and the gateway's own work to it; and `relay-fasthttp`, the same relay on fasthttp (fast.go)")
	keys := flag.Bool("keys", false, "also measure a gateway with API keys and every limit on (generous: none is reached), `gateway+keys`; every request carries the key")
	streams := flag.String("streams", "", "measure streamed completions from llama.cpp's real server (make llama-server) instead, at these numbers of concurrent streams (comma-separated, e.g. 1,64): time to first token and inter-token gap, direct, through the gateway and through -nginx")
	inproc := flag.Bool("inproc", false, "serve fake-engine and the gateway from this process instead (no CPU time per process then)")
	rounds := flag.Int("rounds", 1, "measure every rate this many times (1 to 10), each round starting the targets' alternation at another place; a summary gives each target's median and range over the rounds")
	single := flag.Bool("single", false, "also measure one client sending one request at a time (closed loop, the phase \"1client\"): the latency each proxy adds with no queueing")
	also := flag.String("also", "", "also measure the gateway with keys as other builds of this program serve it (`NAME=PATH`, comma-separated, e.g. before=/tmp/gwload-before): its process started as PATH -serve gateway -keys, measured in the same slices as the others")
	pin := flag.String("pin", "", "pin the processes (Linux, 2 CPUs or more): `alone` gives the gateway the last CPU to itself, the generator and fake-engine share the others; with-engine puts the gateway and fake-engine on the last CPU, the generator on the others")
	flag.Parse()
	if *serveRole != "" {
		if err := serve(*serveRole, *upstream, *cpuprofile, *keys); err != nil {
			fmt.Fprintln(os.Stderr, "gwload:", err)
			os.Exit(1)
		}
		return
	}
	if *streams != "" {
		if err := runStreams(*streams, min(*dur, 30*time.Second), *nginx); err != nil {
			fmt.Fprintln(os.Stderr, "gwload:", err)
			os.Exit(1)
		}
		return
	}
	refs := references{nginx: *nginx, minimal: *minimal}
	var err error
	if refs.also, err = parseAlso(*also); err != nil {
		fmt.Fprintln(os.Stderr, "gwload: -also:", err)
		os.Exit(2)
	}
	if *rounds < 1 || *rounds > 10 {
		fmt.Fprintln(os.Stderr, "gwload: -rounds: want 1 to 10")
		os.Exit(2)
	}
	if err := run(*rates, *rounds, *single, min(*dur, 30*time.Second), min(*warm, 5*time.Second), max(*slice, 10*time.Millisecond), *inflight, *cpuprofile, *pin, refs, *inproc, *keys); err != nil {
		fmt.Fprintln(os.Stderr, "gwload:", err)
		os.Exit(1)
	}
}

// secret is the API key every request carries; the gateway with keys
// knows it, the others pass it on (fake-engine ignores it).
const secret = "sk-gwload"

// keyFile is the keyed gateway's one key: every limit set, none reached.
var keyFile = `key "gwload" {
  hash                = "` + gateway.HashKey(secret) + `"
  models              = ["m"]
  requests_per_minute = 100000000
  tokens_per_minute   = 100000000000
  max_concurrency     = 100000
}
`

// handler is what serves one side of the measurement, with the body
// deadlines of the gateway's routes for the gateway (nil for the others);
// keys turns the gateway's API keys and limits on.
func handler(ctx context.Context, role, upstream string, keys bool) (http.Handler, gateway.BodyTimeouts, error) {
	switch role {
	case "engine":
		cfg := fakeengine.Defaults()
		cfg.Model, cfg.TokensPerSecond = "m", 0
		fe := fakeengine.NewServer(cfg, io.Discard, io.Discard)
		fe.Load(ctx)
		return fe.Handler(), nil, nil
	case "relay":
		if upstream == "" {
			return nil, nil, errors.New("-serve relay needs -upstream")
		}
		return relayHandler(upstream), nil, nil
	case "gateway":
		if upstream == "" {
			return nil, nil, errors.New("-serve gateway needs -upstream")
		}
		var ks gateway.KeySource
		if keys {
			set, err := gateway.ParseKeys("gwload-keys.hcl", []byte(keyFile))
			if err != nil {
				return nil, nil, err
			}
			ks = gateway.StaticKeys{Set: set}
		}
		g := gateway.New(gateway.Options{
			Keys:       ks,
			Registerer: prometheus.NewRegistry(),
			Logger:     slog.New(slog.DiscardHandler),
			Source: gateway.StaticSource{Instances: []gateway.Instance{
				{ID: "r0", Model: "m", Replica: "r0", Address: upstream, Weight: 1},
			}},
		})
		go func() { _ = g.Run(ctx) }()
		for !g.Synced() || !g.KeysLoaded() {
			time.Sleep(time.Millisecond)
		}
		return g.Handler(), g.BodyTimeout, nil
	}
	return nil, nil, fmt.Errorf("-serve %q: want engine, gateway or relay", role)
}

// listen serves with srv on a loopback port.
func listen(srv *http.Server) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// listenFast serves with srv on a loopback port.
func listenFast(srv *gateway.FastServer) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), func() { _ = srv.Shutdown() }, nil
}

// serveRole serves h as role is served: the gateway as the command serves
// a plaintext listener (gateway.NewFastServer), the relay with net/http's
// server as the gateway's TLS listeners are (gateway.NewServer), the
// engine with a plain one, as a real engine's server is not the gateway's.
func serveRole(role string, h http.Handler, timeouts gateway.BodyTimeouts) (string, func(), error) {
	switch role {
	case "gateway":
		return listenFast(gateway.NewFastServer(h, timeouts, nil))
	case "relay":
		return listen(gateway.NewServer(h, nil))
	}
	return listen(&http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second})
}

// serve runs one side of the measurement until its standard input closes
// (the measuring process went away).
func serve(role, upstream, cpuprofile string, keys bool) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var addr string
	var stop func()
	var err error
	switch role {
	case "minimal":
		addr, stop, err = serveMinimal(upstream)
	case "fastrelay":
		addr, stop, err = serveFastRelay(upstream)
	default:
		var h http.Handler
		var timeouts gateway.BodyTimeouts
		if h, timeouts, err = handler(ctx, role, upstream, keys); err != nil {
			return err
		}
		if cpuprofile != "" {
			pstop, err := profile(cpuprofile)
			if err != nil {
				return err
			}
			defer pstop()
		}
		addr, stop, err = serveRole(role, h, timeouts)
	}
	if err != nil {
		return err
	}
	defer stop()
	fmt.Println(addr)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// profile writes a CPU profile of this process to path until stop.
func profile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }, nil
}

// child is one serving process.
type child struct {
	cmd  *exec.Cmd
	addr string
	in   io.Closer
}

// start runs this program with args; on cpus when that is not empty.
func start(cpus []int, args ...string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return startBin(self, cpus, args...)
}

// startBin runs bin (a build of this program) with args; on cpus when
// that is not empty.
func startBin(bin string, cpus []int, args ...string) (*child, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := startOn(cmd, cpus); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("%s: no address: %w", strings.Join(args, " "), err)
	}
	return &child{cmd: cmd, addr: strings.TrimSpace(line), in: in}, nil
}

func (c *child) stop() {
	_ = c.in.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// cpu is the CPU time the process has used.
func (c *child) cpu() time.Duration { return processCPU(c.cmd.Process.Pid) }

// server is one side of the measurement: its address, and the CPU time
// it has used when it runs in a process of its own (nil otherwise).
type server struct {
	addr string
	cpu  func() time.Duration
	stop func()
}

func (s *server) cpuNow() time.Duration {
	if s.cpu == nil {
		return 0
	}
	return s.cpu()
}

// startInProcess serves the engine and the gateway from this process.
func startInProcess() (*server, *server, error) {
	ctx, cancel := context.WithCancel(context.Background())
	eh, _, err := handler(ctx, "engine", "", false)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	eaddr, estop, err := serveRole("engine", eh, nil)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	gh, timeouts, err := handler(ctx, "gateway", eaddr, false)
	if err == nil {
		var gaddr string
		var gstop func()
		if gaddr, gstop, err = serveRole("gateway", gh, timeouts); err == nil {
			return &server{addr: eaddr, stop: estop}, &server{addr: gaddr, stop: func() { gstop(); cancel() }}, nil
		}
	}
	estop()
	cancel()
	return nil, nil, err
}

// startProcesses runs the engine and the gateway as processes of their
// own, pinned as pin says ("": not pinned).
func startProcesses(pin, cpuprofile string) (engine, gw *server, placement string, err error) {
	var gwCPUs, engCPUs []int
	placement = "three processes, unpinned"
	if pin != "" {
		n := runtime.NumCPU()
		if n < 2 {
			return nil, nil, "", errors.New("-pin needs 2 CPUs or more")
		}
		var rest []int
		for c := range n - 1 {
			rest = append(rest, c)
		}
		gwCPUs = []int{n - 1}
		if err := pinProcess(rest); err != nil {
			return nil, nil, "", err
		}
		if pin == "alone" {
			engCPUs = rest
			placement = fmt.Sprintf("three processes, gateway alone on CPU %d, generator and fake-engine on CPUs %v", n-1, rest)
		} else {
			engCPUs = gwCPUs
			placement = fmt.Sprintf("three processes, gateway and fake-engine on CPU %d, generator on CPUs %v", n-1, rest)
		}
	}
	ec, err := start(engCPUs, "-serve", "engine")
	if err != nil {
		return nil, nil, "", err
	}
	gargs := []string{"-serve", "gateway", "-upstream", ec.addr}
	if cpuprofile != "" {
		gargs = append(gargs, "-cpuprofile", cpuprofile)
	}
	gc, err := start(gwCPUs, gargs...)
	if err != nil {
		ec.stop()
		return nil, nil, "", err
	}
	return &server{addr: ec.addr, cpu: ec.cpu, stop: ec.stop}, &server{addr: gc.addr, cpu: gc.cpu, stop: gc.stop}, placement, nil
}

// references are the proxies measured beside the gateway.
type references struct {
	nginx   string // the binary, "" for none
	minimal bool
	also    []build // other builds' gateways
}

// build is another build of this program whose gateway is measured
// (-also): its name in the tables, and its binary.
type build struct{ name, bin string }

// parseAlso parses -also's NAME=PATH list.
func parseAlso(list string) ([]build, error) {
	if list == "" {
		return nil, nil
	}
	var out []build
	for f := range strings.SplitSeq(list, ",") {
		name, bin, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok || name == "" || bin == "" {
			return nil, fmt.Errorf("%q: want NAME=PATH", f)
		}
		if _, err := os.Stat(bin); err != nil {
			return nil, err
		}
		out = append(out, build{name: name + "+keys", bin: bin})
	}
	return out, nil
}

func run(rateList string, rounds int, single bool, dur, warm, slice time.Duration, inflight int, cpuprofile, pin string, refs references, inproc, keys bool) error {
	nginxBin := refs.nginx
	rates, err := intList("-rates", rateList, 1, 50000)
	if err != nil {
		return err
	}
	var engine, gw *server
	var placement string
	if nginxBin != "" {
		if nginxBin, err = exec.LookPath(nginxBin); err != nil {
			return fmt.Errorf("-nginx: %w", err)
		}
	}
	switch {
	case inproc && pin != "":
		return errors.New("-inproc and -pin: choose one")
	case pin != "" && pin != "alone" && pin != "with-engine":
		return fmt.Errorf("-pin %q: want alone or with-engine", pin)
	case inproc && refs.minimal:
		return errors.New("-minimal measures a process of its own: not with -inproc")
	}
	if inproc {
		if cpuprofile != "" {
			stop, perr := profile(cpuprofile)
			if perr != nil {
				return perr
			}
			defer stop()
		}
		engine, gw, err = startInProcess()
		placement = "all in this process"
	} else {
		engine, gw, placement, err = startProcesses(pin, cpuprofile)
	}
	if err != nil {
		return err
	}
	defer engine.stop()
	defer gw.stop()
	targets := []target{{"direct", engine}, {"gateway", gw}}
	if keys {
		kprofile := ""
		if cpuprofile != "" && !inproc {
			kprofile = cpuprofile + ".keys"
		}
		kg, err := startKeyedGateway(inproc, engine.addr, pin, kprofile)
		if err != nil {
			return err
		}
		defer kg.stop()
		targets = append(targets, target{"gateway+keys", kg})
		placement += "; the keyed gateway its own process"
		if inproc {
			placement = strings.TrimSuffix(placement, "; the keyed gateway its own process") + ", the keyed gateway too"
		} else if pin != "" {
			placement += ", on the gateway's CPU"
		}
	}
	for _, b := range refs.also {
		if inproc {
			return errors.New("-also measures a process of its own: not with -inproc")
		}
		var cpus []int
		if pin != "" {
			cpus = []int{runtime.NumCPU() - 1}
		}
		c, err := startBin(b.bin, cpus, "-serve", "gateway", "-upstream", engine.addr, "-keys")
		if err != nil {
			return fmt.Errorf("-also %s: %w", b.name, err)
		}
		defer c.stop()
		targets = append(targets, target{b.name, &server{addr: c.addr, cpu: c.cpu, stop: c.stop}})
		placement += "; " + b.name + " (" + b.bin + ") its own process"
	}
	if refs.minimal {
		c, err := start(nginxCPUs(pin), "-serve", "minimal", "-upstream", engine.addr)
		if err != nil {
			return err
		}
		defer c.stop()
		targets = append(targets, target{"minimal-go", &server{addr: c.addr, cpu: c.cpu, stop: c.stop}})
		rc, err := start(nginxCPUs(pin), "-serve", "relay", "-upstream", engine.addr)
		if err != nil {
			return err
		}
		defer rc.stop()
		targets = append(targets, target{"relay-nethttp", &server{addr: rc.addr, cpu: rc.cpu, stop: rc.stop}})
		fc, err := start(nginxCPUs(pin), "-serve", "fastrelay", "-upstream", engine.addr)
		if err != nil {
			return err
		}
		defer fc.stop()
		targets = append(targets, target{"relay-fasthttp", &server{addr: fc.addr, cpu: fc.cpu, stop: fc.stop}})
		placement += "; a minimal Go proxy, a net/http relay and a fasthttp relay, each its own process"
		if pin != "" {
			placement += ", on the gateway's CPU"
		}
	}
	if nginxBin != "" {
		ngx, err := startNginx(nginxBin, engine.addr, nginxCPUs(pin))
		if err != nil {
			return err
		}
		defer ngx.stop()
		targets = append(targets, target{"nginx", ngx})
		placement += "; nginx (" + nginxBin + ") its own process"
		if pin != "" {
			placement += ", on the gateway's CPU"
		}
	}

	// The generator's client is fasthttp's, which sends and reads on the
	// request's goroutine, the cheapest client at hand: on a small
	// machine, CPU the generator spends is CPU the engine and gateway do
	// not get.
	client := &fasthttp.Client{MaxConnsPerHost: 1 << 16, ReadTimeout: time.Minute, NoDefaultUserAgentHeader: true}
	gogc := os.Getenv("GOGC")
	if gogc == "" {
		gogc = "default"
	}
	fmt.Printf("gwload: %s %s/%s, %d CPUs, GOGC %s; generator, fake-engine and gateway: %s\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), gogc, placement)
	fmt.Printf("per rate and target: %s of load in %s slices alternating targets, after %s warm-up each; open loop, at most %d in flight;\nlatency = request sent to response read; late = sent over 1 ms after its due time; req/s = answers (200) per second of the target's slices, the rate\nwhile the target keeps up, its throughput with %d in flight (a closed loop) when the rate is past it; cpu/req = process CPU time per request (proxy cpu: the gateway's, or nginx's master and workers')\n\n", dur, slice, warm, inflight, inflight)
	fmt.Printf("%-5s %-8s %-12s %8s %7s %6s %8s %9s %9s %9s %9s %9s %12s %12s\n", "round", "rate", "target", "sent", "errors", "late", "req/s", "p50", "p90", "p99", "p99.9", "max", "engine cpu", "proxy cpu")
	var phases []phaseSpec
	for _, rate := range rates {
		phases = append(phases, phaseSpec{name: strconv.Itoa(rate), load: func(url string, d time.Duration) result { return load(client, url, rate, d, inflight) }})
	}
	if single {
		phases = append(phases, phaseSpec{name: "1client", load: func(url string, d time.Duration) result { return loadOne(client, url, d) }})
	}
	sum := newSummary(targets)
	for _, b := range refs.also {
		sum.gateways = append(sum.gateways, b.name)
	}
	for round := range rounds {
		for _, ph := range phases {
			for _, t := range targets {
				ph.load(t.url(), warm) // warm-up, discarded
			}
			res, engCPU, proxyCPU := measure(targets, engine, ph.load, dur, slice, round)
			for i, t := range targets {
				r := res[i]
				pcpu := "-"
				if i > 0 {
					pcpu = cpuPerReq(t.srv, proxyCPU[i], r.sent)
				}
				fmt.Printf("%-5d %-8s %-12s %8d %7d %6d %8.0f %9s %9s %9s %9s %9s %12s %12s\n", round+1, ph.name, t.name, r.sent, r.errors, r.late, r.perSecond(),
					us(r.pct(50)), us(r.pct(90)), us(r.pct(99)), us(r.pct(99.9)), us(r.pct(100)),
					cpuPerReq(engine, engCPU[i], r.sent), pcpu)
			}
			for i := 1; i < len(targets); i++ {
				fmt.Printf("%-5d %-8s %-12s %8s %7s %6s %8s %9s %9s %9s\n", round+1, ph.name, "+"+targets[i].name, "", "", "", "",
					us(res[i].pct(50)-res[0].pct(50)), us(res[i].pct(90)-res[0].pct(90)), us(res[i].pct(99)-res[0].pct(99)))
			}
			if keys {
				k := slices.IndexFunc(targets, func(t target) bool { return t.name == "gateway+keys" }) // against the gateway (1)
				fmt.Printf("%-5d %-8s %-12s %8s %7s %6s %8s %9s %9s %9s\n", round+1, ph.name, "keys added", "", "", "", "",
					us(res[k].pct(50)-res[1].pct(50)), us(res[k].pct(90)-res[1].pct(90)), us(res[k].pct(99)-res[1].pct(99)))
			}
			sum.add(ph.name, res, proxyCPU)
			fmt.Println()
		}
	}
	sum.print(os.Stdout, phases)
	return nil
}

// phaseSpec is one load shape measured on every target: an open-loop
// rate, or one client sending a request at a time.
type phaseSpec struct {
	name string
	load func(url string, d time.Duration) result
}

// measure runs one phase on every target in alternating slices for dur
// and returns each target's result, the engine's CPU time during its
// slices and its own (the proxy's). Slice s goes through the targets
// rotated by s+round, and every other n slices backwards: each target
// takes each place, none always follows the same one (for two: ABBA), and
// rounds do not start in the same order.
func measure(targets []target, engine *server, load func(string, time.Duration) result, dur, slice time.Duration, round int) (res []result, engCPU, proxyCPU []time.Duration) {
	n := len(targets)
	res = make([]result, n)
	engCPU = make([]time.Duration, n)
	proxyCPU = make([]time.Duration, n)
	nslices := max(int(dur/slice), 1)
	for sl := range nslices {
		r := sl + round
		for j := range n {
			i := (j + r) % n
			if (r/n)%2 == 1 {
				i = (n - 1 - j + r) % n
			}
			s := targets[i].srv
			e0, p0 := engine.cpuNow(), s.cpuNow()
			res[i].add(load(targets[i].url(), slice))
			engCPU[i] += engine.cpuNow() - e0
			if i > 0 {
				proxyCPU[i] += s.cpuNow() - p0
			}
		}
	}
	for i := range res {
		res[i].sort()
	}
	return res, engCPU, proxyCPU
}

// startKeyedGateway serves the gateway with keys to the engine at eaddr:
// in this process, or in its own (on the gateway's CPU under -pin).
func startKeyedGateway(inproc bool, eaddr, pin, cpuprofile string) (*server, error) {
	if inproc {
		ctx, cancel := context.WithCancel(context.Background())
		h, timeouts, err := handler(ctx, "gateway", eaddr, true)
		if err != nil {
			cancel()
			return nil, err
		}
		addr, stop, err := serveRole("gateway", h, timeouts)
		if err != nil {
			cancel()
			return nil, err
		}
		return &server{addr: addr, stop: func() { stop(); cancel() }}, nil
	}
	var cpus []int
	if pin != "" {
		cpus = []int{runtime.NumCPU() - 1}
	}
	args := []string{"-serve", "gateway", "-upstream", eaddr, "-keys"}
	if cpuprofile != "" {
		args = append(args, "-cpuprofile", cpuprofile)
	}
	c, err := start(cpus, args...)
	if err != nil {
		return nil, err
	}
	return &server{addr: c.addr, cpu: c.cpu, stop: c.stop}, nil
}

// target is one thing the load goes to: the engine itself, or a proxy in
// front of it.
type target struct {
	name string
	srv  *server
}

func (t target) url() string { return "http://" + t.srv.addr + "/v1/chat/completions" }

// nginxCPUs is where nginx runs: beside the gateway under -pin, so the two
// proxies get the same CPU; anywhere otherwise.
func nginxCPUs(pin string) []int {
	if pin == "" {
		return nil
	}
	return []int{runtime.NumCPU() - 1}
}

// cpuPerReq is the CPU time s used per request, "-" when it is not known
// (s runs in this process).
func cpuPerReq(s *server, d time.Duration, n int) string {
	if s.cpu == nil || n == 0 {
		return "-"
	}
	return us(d / time.Duration(n))
}

func us(d time.Duration) string { return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond)) }

type result struct {
	sent, errors, late int
	lat                []time.Duration
	took               time.Duration // from the first request sent to the last answer read
}

func (r *result) add(o result) {
	r.took += o.took
	r.sent += o.sent
	r.errors += o.errors
	r.late += o.late
	r.lat = append(r.lat, o.lat...)
}

func (r *result) sort() { slices.Sort(r.lat) }

// perSecond is the answers (200) per second the load took.
func (r result) perSecond() float64 {
	if r.took <= 0 {
		return 0
	}
	return float64(len(r.lat)) / r.took.Seconds()
}

func (r result) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(float64(len(r.lat)-1) * p / 100)
	return r.lat[i]
}

// load sends rate requests a second to url for dur, open loop: request i
// is due at i/rate; one that cannot start on time (all slots busy, or the
// sender behind) is sent as soon as it can and counted late.
func load(client *fasthttp.Client, url string, rate int, dur time.Duration, inflight int) result {
	n := int(int64(rate) * int64(dur) / int64(time.Second))
	lat := make([]time.Duration, n)
	ok := make([]bool, n)
	slots := make(chan struct{}, inflight)
	var late atomic.Int64
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		} else if d < -time.Millisecond {
			late.Add(1)
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			t0 := time.Now()
			if send(client, url) {
				lat[i], ok[i] = time.Since(t0), true
			}
		})
	}
	wg.Wait()
	r := result{sent: n, late: int(late.Load()), took: time.Since(start)}
	for i := range n {
		if ok[i] {
			r.lat = append(r.lat, lat[i])
		} else {
			r.errors++
		}
	}
	return r
}

// send sends the chat completion to url and reads its answer: whether
// it was a 200.
func send(client *fasthttp.Client, url string) bool {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(url)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set("Authorization", "Bearer "+secret)
	req.SetBodyString(body)
	return client.Do(req, resp) == nil && resp.StatusCode() == fasthttp.StatusOK
}

// intList parses a comma-separated list of whole numbers from lo to hi,
// the value of flag.
func intList(flag, list string, lo, hi int) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("%s: %q: want %d to %d", flag, f, lo, hi)
		}
		out = append(out, n)
	}
	return out, nil
}
