// Command cudaprobe prints the CUDA devices a process sees, for the GPU
// tier (make test-gpu): the driver runs it as an engine under the
// environment it computed, and the test compares what it saw with what was
// allocated. nvidia-smi cannot play this part: it reads NVML, which ignores
// CUDA_VISIBLE_DEVICES and lists every GPU of the host.
//
// It loads the CUDA driver library (libcuda.so.1, installed with the NVIDIA
// driver) at run time, so it builds on any machine; cuInit applies
// CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER as in any CUDA program. It
// prints one line per visible device,
//
//	cuda <ordinal> uuid=<UUID without its GPU-/MIG- prefix> pci=<bus id>
//
// then "cuda devices=<n>". With -hold D it then keeps a context and a
// small allocation open on each device for D, or until SIGTERM or SIGINT,
// so NVML lists it as a compute process there. It exits 2 when libcuda is
// missing, 3 when CUDA fails.
package main

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct { unsigned char bytes[16]; } CUuuid;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

static void *lib;
static CUresult (*p_cuInit)(unsigned int);
static CUresult (*p_cuDeviceGetCount)(int *);
static CUresult (*p_cuDeviceGet)(CUdevice *, int);
static CUresult (*p_cuDeviceGetUuid)(CUuuid *, CUdevice);
static CUresult (*p_cuDeviceGetPCIBusId)(char *, int, CUdevice);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuMemAlloc)(CUdeviceptr *, size_t);

static const char *probe_open(void) {
	lib = dlopen("libcuda.so.1", RTLD_NOW);
	if (!lib) return dlerror();
	p_cuInit = dlsym(lib, "cuInit");
	p_cuDeviceGetCount = dlsym(lib, "cuDeviceGetCount");
	p_cuDeviceGet = dlsym(lib, "cuDeviceGet");
	// _v2 returns a MIG instance's own UUID (CUDA 11.4 and later).
	p_cuDeviceGetUuid = dlsym(lib, "cuDeviceGetUuid_v2");
	if (!p_cuDeviceGetUuid) p_cuDeviceGetUuid = dlsym(lib, "cuDeviceGetUuid");
	p_cuDeviceGetPCIBusId = dlsym(lib, "cuDeviceGetPCIBusId");
	p_cuDevicePrimaryCtxRetain = dlsym(lib, "cuDevicePrimaryCtxRetain");
	p_cuCtxSetCurrent = dlsym(lib, "cuCtxSetCurrent");
	p_cuMemAlloc = dlsym(lib, "cuMemAlloc_v2");
	if (!p_cuInit || !p_cuDeviceGetCount || !p_cuDeviceGet || !p_cuDeviceGetUuid || !p_cuDeviceGetPCIBusId ||
	    !p_cuDevicePrimaryCtxRetain || !p_cuCtxSetCurrent || !p_cuMemAlloc)
		return "libcuda.so.1 lacks a driver API function this probe uses";
	return NULL;
}

static CUresult probe_init(void) { return p_cuInit(0); }
static CUresult probe_count(int *n) { return p_cuDeviceGetCount(n); }

static CUresult probe_device(int ordinal, unsigned char uuid[16], char *bus, int buslen) {
	CUdevice d;
	CUresult r = p_cuDeviceGet(&d, ordinal);
	if (r) return r;
	CUuuid u;
	if ((r = p_cuDeviceGetUuid(&u, d))) return r;
	for (int i = 0; i < 16; i++) uuid[i] = u.bytes[i];
	return p_cuDeviceGetPCIBusId(bus, buslen, d);
}

static CUresult probe_hold(int ordinal, size_t bytes) {
	CUdevice d;
	CUcontext ctx;
	CUdeviceptr p;
	CUresult r = p_cuDeviceGet(&d, ordinal);
	if (r) return r;
	if ((r = p_cuDevicePrimaryCtxRetain(&ctx, d))) return r;
	if ((r = p_cuCtxSetCurrent(ctx))) return r;
	return p_cuMemAlloc(&p, bytes);
}
*/
import "C"

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
	"unsafe"
)

func main() {
	hold := flag.Duration("hold", 0, "keep a CUDA context and 64 MiB open on each device this long (at most 10m), or until SIGTERM")
	flag.Parse()
	if *hold > 10*time.Minute {
		*hold = 10 * time.Minute
	}
	if msg := C.probe_open(); msg != nil {
		fmt.Fprintf(os.Stderr, "cudaprobe: %s\n", C.GoString(msg))
		os.Exit(2)
	}
	if r := C.probe_init(); r != 0 {
		fail("cuInit", r)
	}
	var n C.int
	if r := C.probe_count(&n); r != 0 {
		fail("cuDeviceGetCount", r)
	}
	for i := 0; i < int(n); i++ {
		var uuid [16]C.uchar
		var bus [32]C.char
		if r := C.probe_device(C.int(i), &uuid[0], &bus[0], C.int(len(bus))); r != 0 {
			fail(fmt.Sprintf("device %d", i), r)
		}
		b := C.GoBytes(unsafe.Pointer(&uuid[0]), 16)
		fmt.Printf("cuda %d uuid=%x-%x-%x-%x-%x pci=%s\n", i, b[0:4], b[4:6], b[6:8], b[8:10], b[10:16], C.GoString(&bus[0]))
	}
	fmt.Printf("cuda devices=%d\n", n)
	if *hold <= 0 {
		return
	}
	for i := 0; i < int(n); i++ {
		if r := C.probe_hold(C.int(i), 64<<20); r != 0 {
			fail(fmt.Sprintf("hold device %d", i), r)
		}
	}
	fmt.Printf("cuda holding %s\n", *hold)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
	case <-time.After(*hold):
	}
}

func fail(what string, r C.CUresult) {
	fmt.Fprintf(os.Stderr, "cudaprobe: %s: CUDA error %d\n", what, int(r))
	os.Exit(3)
}
