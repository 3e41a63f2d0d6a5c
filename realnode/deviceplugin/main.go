// Command gpushare-device-plugin is the project's stand-in for ACK's gpushare device plugin on the
// real nodes of the local test bed. It speaks the kubelet's device-plugin API v1beta1 and behaves
// as ACK's plugin does towards the kubelet and the API server:
//
//   - it reads its node's labels when it starts and whenever the kubelet's registration socket
//     (kubelet.sock) is re-created (a kubelet restart); it then registers again;
//   - ack.node.gpu.schedule picks the mode: cgpu/share/mps advertise aliyun.com/gpu-mem (one device
//     per GiB, or per MiB with --memory-unit=MiB), core_mem also aliyun.com/gpu-core.percentage
//     (100 per GPU), default nvidia.com/gpu, topology aliyun.com/gpu; the other modes' resources
//     are registered with no devices, so the kubelet sets them to 0;
//   - it patches aliyun.com/gpu-count into the node's status (capacity and allocatable);
//   - Allocate answers with ACK's environment: ALIYUN_COM_GPU_MEM_IDX, _POD, _CONTAINER, _DEV,
//     NVIDIA_VISIBLE_DEVICES, and CGPU_DISABLE=true when cgpu.disable.isolation=true was read.
//
// The GPUs are given to it (--gpus, --gpu-memory-mib): there is no NVML here. The API server is
// reached with the pod's ServiceAccount token (KUBERNETES_SERVICE_HOST/PORT, token and CA files).
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const (
	labelSchedule         = "ack.node.gpu.schedule"
	labelDisableIsolation = "cgpu.disable.isolation"
	resGPUMem             = "aliyun.com/gpu-mem"
	resGPUCore            = "aliyun.com/gpu-core.percentage"
	resGPUCount           = "aliyun.com/gpu-count"
	resNvidiaGPU          = "nvidia.com/gpu"
	resAliyunGPU          = "aliyun.com/gpu"
	annoAssigned          = "ALIYUN_COM_GPU_MEM_ASSIGNED"
	annoIdx               = "ALIYUN_COM_GPU_MEM_IDX"
	annoAssumeTime        = "ALIYUN_COM_GPU_MEM_ASSUME_TIME"
	// annoHang on the node: the plugin runs but does not register (a plugin that does not come
	// back), as the devcluster's simulator does for kwok nodes. Checked before each registration.
	annoHang = "gpushare.io/simulated-plugin-hang"
)

// errHang: the node asks this plugin not to register yet.
var errHang = fmt.Errorf("node annotated %s=true: not registering", annoHang)

// socketOf: one registration (one gRPC server) per resource; gpu-mem on ACK's socket name.
var socketOf = map[string]string{
	resGPUMem:    "aliyungpushare.sock",
	resGPUCore:   "gpushare-core.sock",
	resNvidiaGPU: "gpushare-nvidia-gpu.sock",
	resAliyunGPU: "gpushare-aliyun-gpu.sock",
}

type config struct {
	node      string
	gpus      int
	memMiB    int
	unit      string
	dir       string
	tokenFile string
	caFile    string
	server    string
}

// ---- API server (plain REST with the pod's token) ----------------------------------------------

type kube struct {
	cfg    config
	client *http.Client
}

func newKube(cfg config) (*kube, error) {
	pem, err := os.ReadFile(cfg.caFile)
	if err != nil {
		return nil, fmt.Errorf("reading the API server CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", cfg.caFile)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	return &kube{cfg: cfg, client: &http.Client{Transport: tr, Timeout: 10 * time.Second}}, nil
}

func (k *kube) do(method, path, contentType string, body []byte, out any) error {
	token, err := os.ReadFile(k.cfg.tokenFile) // projected tokens rotate: read it every time
	if err != nil {
		return fmt.Errorf("reading the token: %w", err)
	}
	req, err := http.NewRequest(method, k.cfg.server+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, strings.TrimSpace(string(data)))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

type objectMeta struct {
	Name              string            `json:"name"`
	Namespace         string            `json:"namespace"`
	UID               string            `json:"uid"`
	Labels            map[string]string `json:"labels"`
	Annotations       map[string]string `json:"annotations"`
	CreationTimestamp string            `json:"creationTimestamp"`
	DeletionTimestamp *string           `json:"deletionTimestamp"`
}

func (k *kube) nodeMeta() (objectMeta, error) {
	var node struct {
		Metadata objectMeta `json:"metadata"`
	}
	err := k.do("GET", "/api/v1/nodes/"+url.PathEscape(k.cfg.node), "", nil, &node)
	return node.Metadata, err
}

func (k *kube) patchGPUCount(count int) error {
	v := strconv.Itoa(count)
	patch := map[string]any{"status": map[string]any{
		"capacity":    map[string]string{resGPUCount: v},
		"allocatable": map[string]string{resGPUCount: v},
	}}
	body, _ := json.Marshal(patch)
	return k.do("PATCH", "/api/v1/nodes/"+url.PathEscape(k.cfg.node)+"/status", "application/merge-patch+json", body, nil)
}

type pod struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		Containers []struct {
			Name      string `json:"name"`
			Resources struct {
				Limits map[string]string `json:"limits"`
			} `json:"resources"`
		} `json:"containers"`
	} `json:"spec"`
	Status struct {
		Phase string `json:"phase"`
	} `json:"status"`
}

func (p *pod) gpuMem() (total int, per []int) {
	for _, c := range p.Spec.Containers {
		n, _ := strconv.Atoi(c.Resources.Limits[resGPUMem])
		per = append(per, n)
		total += n
	}
	return total, per
}

// pendingPod: the pod on this node that the Allocate of `units` gpu-mem is for, as ACK's plugin
// picks it: not yet assigned, a container asking for exactly `units`, the earliest assume time
// (or creation) first.
func (k *kube) pendingPod(units int) (*pod, error) {
	var list struct {
		Items []pod `json:"items"`
	}
	q := url.Values{"fieldSelector": {"spec.nodeName=" + k.cfg.node + ",status.phase=Pending"}}
	if err := k.do("GET", "/api/v1/pods?"+q.Encode(), "", nil, &list); err != nil {
		return nil, err
	}
	var found []pod
	for _, p := range list.Items {
		if p.Metadata.DeletionTimestamp != nil || p.Metadata.Annotations[annoAssigned] == "true" {
			continue
		}
		_, per := p.gpuMem()
		for _, n := range per {
			if n == units {
				found = append(found, p)
				break
			}
		}
	}
	if len(found) == 0 {
		return nil, nil
	}
	key := func(p pod) string {
		if t := p.Metadata.Annotations[annoAssumeTime]; t != "" {
			return t
		}
		return p.Metadata.CreationTimestamp
	}
	sort.SliceStable(found, func(i, j int) bool { return key(found[i]) < key(found[j]) })
	return &found[0], nil
}

func (k *kube) markAssigned(p *pod) error {
	patch := map[string]any{"metadata": map[string]any{"annotations": map[string]string{annoAssigned: "true"}}}
	body, _ := json.Marshal(patch)
	path := "/api/v1/namespaces/" + url.PathEscape(p.Metadata.Namespace) + "/pods/" + url.PathEscape(p.Metadata.Name)
	return k.do("PATCH", path, "application/merge-patch+json", body, nil)
}

// ---- what a mode advertises ----------------------------------------------------------------------

type state struct {
	mode       string
	noIsolate  bool
	perGPUUnit int            // gpu-mem units of one GPU (GiB floored, or MiB)
	devices    map[string]int // resource -> device count (0: registered empty)
	gpuCount   int            // the aliyun.com/gpu-count patched into the node status
}

func plan(cfg config, labels map[string]string) state {
	mode := labels[labelSchedule]
	if mode == "" {
		mode = "default"
	}
	per := cfg.memMiB / 1024
	if cfg.unit == "MiB" {
		per = cfg.memMiB
	}
	s := state{mode: mode, noIsolate: labels[labelDisableIsolation] == "true", perGPUUnit: per,
		devices: map[string]int{resGPUMem: 0, resGPUCore: 0, resNvidiaGPU: 0, resAliyunGPU: 0}}
	switch mode {
	case "cgpu", "share", "mps", "core_mem":
		s.devices[resGPUMem] = per * cfg.gpus
		s.gpuCount = cfg.gpus
		if mode == "core_mem" {
			s.devices[resGPUCore] = 100 * cfg.gpus
		}
	case "topology":
		s.devices[resAliyunGPU] = cfg.gpus
	default:
		s.devices[resNvidiaGPU] = cfg.gpus
	}
	return s
}

func gpuUUID(cfg config, i int) string { return fmt.Sprintf("GPU-%s-%d", cfg.node, i) }

// deviceIDs: ACK's scheme for gpu-mem (<GPU-UUID>-_-<j>), likewise for the others.
func deviceIDs(cfg config, s state, resource string) []string {
	n := s.devices[resource]
	if n == 0 || cfg.gpus == 0 {
		return nil
	}
	per := n / cfg.gpus
	var ids []string
	for i := 0; i < cfg.gpus; i++ {
		if resource == resNvidiaGPU || resource == resAliyunGPU {
			ids = append(ids, gpuUUID(cfg, i))
			continue
		}
		for j := 0; j < per; j++ {
			ids = append(ids, fmt.Sprintf("%s-_-%d", gpuUUID(cfg, i), j))
		}
	}
	return ids
}

// ---- one resource's gRPC server -----------------------------------------------------------------

type server struct {
	pluginapi.UnimplementedDevicePluginServer
	cfg      config
	kube     *kube
	st       state
	resource string
	socket   string
	grpc     *grpc.Server
	stop     chan struct{}
}

func (s *server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (s *server) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	var devs []*pluginapi.Device
	for _, id := range deviceIDs(s.cfg, s.st, s.resource) {
		devs = append(devs, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
		return err
	}
	select {
	case <-s.stop:
	case <-stream.Context().Done():
	}
	return nil
}

func (s *server) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (s *server) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func (s *server) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, creq := range req.ContainerRequests {
		env := map[string]string{}
		switch s.resource {
		case resGPUMem:
			units := len(creq.DevicesIds)
			podTotal, idx := units, "0"
			p, err := s.kube.pendingPod(units)
			if err != nil {
				log.Printf("allocate %d %s: looking up the pending pod: %v", units, resGPUMem, err)
			}
			if p != nil {
				podTotal, _ = p.gpuMem()
				if v := p.Metadata.Annotations[annoIdx]; v != "" {
					idx = v
				}
				if err := s.kube.markAssigned(p); err != nil {
					log.Printf("allocate: marking %s/%s assigned: %v", p.Metadata.Namespace, p.Metadata.Name, err)
				}
				log.Printf("allocate %d %s for pod %s/%s (GPU %s)", units, resGPUMem, p.Metadata.Namespace, p.Metadata.Name, idx)
			} else {
				log.Printf("allocate %d %s: no pending pod matched; GPU %s", units, resGPUMem, idx)
			}
			env["NVIDIA_VISIBLE_DEVICES"] = idx
			env["ALIYUN_COM_GPU_MEM_IDX"] = idx
			env["ALIYUN_COM_GPU_MEM_POD"] = strconv.Itoa(podTotal)
			env["ALIYUN_COM_GPU_MEM_CONTAINER"] = strconv.Itoa(units)
			env["ALIYUN_COM_GPU_MEM_DEV"] = strconv.Itoa(s.st.perGPUUnit)
			if s.st.noIsolate {
				env["CGPU_DISABLE"] = "true"
			}
		case resNvidiaGPU, resAliyunGPU:
			env["NVIDIA_VISIBLE_DEVICES"] = strings.Join(creq.DevicesIds, ",")
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{Envs: env})
	}
	return resp, nil
}

func (s *server) serve() error {
	_ = os.Remove(s.socket)
	lis, err := net.Listen("unix", s.socket)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.socket, err)
	}
	s.grpc = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(s.grpc, s)
	go func() { _ = s.grpc.Serve(lis) }()
	return nil
}

func (s *server) register(kubeletSocket string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(s.socket),
		ResourceName: s.resource,
		Options:      &pluginapi.DevicePluginOptions{},
	})
	return err
}

func (s *server) shutdown() {
	close(s.stop)
	if s.grpc != nil {
		s.grpc.Stop()
	}
	_ = os.Remove(s.socket)
}

// ---- main loop ----------------------------------------------------------------------------------

type sockID struct {
	ino   uint64
	mtime int64
}

func statSocket(path string) (sockID, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return sockID{}, false
	}
	return sockID{ino: st.Ino, mtime: st.Mtim.Nano()}, true
}

func startOnce(cfg config, k *kube, kubeletSocket string) ([]*server, error) {
	meta, err := k.nodeMeta()
	if err != nil {
		return nil, fmt.Errorf("reading the labels of node %s: %w", cfg.node, err)
	}
	if meta.Annotations[annoHang] == "true" {
		return nil, errHang
	}
	st := plan(cfg, meta.Labels)
	if err := k.patchGPUCount(st.gpuCount); err != nil {
		return nil, fmt.Errorf("patching %s: %w", resGPUCount, err)
	}
	var servers []*server
	names := make([]string, 0, len(st.devices))
	for r := range st.devices {
		names = append(names, r)
	}
	sort.Strings(names)
	for _, r := range names {
		s := &server{cfg: cfg, kube: k, st: st, resource: r, socket: filepath.Join(cfg.dir, socketOf[r]), stop: make(chan struct{})}
		if err := s.serve(); err != nil {
			stopAll(servers)
			return nil, err
		}
		servers = append(servers, s)
		if err := s.register(kubeletSocket); err != nil {
			stopAll(servers)
			return nil, fmt.Errorf("registering %s with the kubelet: %w", r, err)
		}
	}
	adv := []string{}
	for _, r := range names {
		adv = append(adv, fmt.Sprintf("%s=%d", r, st.devices[r]))
	}
	log.Printf("registered: node %s mode %s isolation-disabled %v %s=%d %s", cfg.node, st.mode, st.noIsolate,
		resGPUCount, st.gpuCount, strings.Join(adv, " "))
	return servers, nil
}

func stopAll(servers []*server) {
	for _, s := range servers {
		s.shutdown()
	}
}

func main() {
	var cfg config
	flag.StringVar(&cfg.node, "node-name", os.Getenv("NODE_NAME"), "this node's name (env NODE_NAME)")
	flag.IntVar(&cfg.gpus, "gpus", 1, "GPUs on the node")
	flag.IntVar(&cfg.memMiB, "gpu-memory-mib", 16384, "memory of one GPU, MiB")
	flag.StringVar(&cfg.unit, "memory-unit", "GiB", "unit of one aliyun.com/gpu-mem device: GiB or MiB")
	flag.StringVar(&cfg.dir, "device-plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory")
	flag.StringVar(&cfg.tokenFile, "token-file", "/var/run/secrets/kubernetes.io/serviceaccount/token", "API token file")
	flag.StringVar(&cfg.caFile, "ca-file", "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt", "API server CA file")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	switch {
	case cfg.node == "":
		log.Fatal("no node name: set NODE_NAME (downward API spec.nodeName) or --node-name")
	case cfg.gpus < 0 || cfg.memMiB <= 0:
		log.Fatalf("--gpus must be >= 0 and --gpu-memory-mib > 0 (got %d, %d)", cfg.gpus, cfg.memMiB)
	case cfg.unit != "GiB" && cfg.unit != "MiB":
		log.Fatalf("--memory-unit must be GiB or MiB, not %q", cfg.unit)
	case host == "" || port == "":
		log.Fatal("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must name the API server")
	}
	cfg.server = "https://" + net.JoinHostPort(host, port)
	k, err := newKube(cfg)
	if err != nil {
		log.Fatal(err)
	}
	kubeletSocket := filepath.Join(cfg.dir, filepath.Base(pluginapi.KubeletSocket))
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	var mu sync.Mutex
	var servers []*server
	done := make(chan struct{})
	go func() {
		<-sigs
		mu.Lock()
		stopAll(servers)
		servers = nil
		mu.Unlock()
		log.Print("stopped")
		close(done)
	}()
	var registeredWith sockID
	hangLogged := false
	for {
		select {
		case <-done:
			return
		default:
		}
		id, ok := statSocket(kubeletSocket)
		if ok && (len(servers) == 0 || id != registeredWith) {
			mu.Lock()
			if len(servers) > 0 {
				log.Printf("%s was re-created (kubelet restart): reading the labels and registering again", kubeletSocket)
				stopAll(servers)
				servers = nil
			}
			s, err := startOnce(cfg, k, kubeletSocket)
			if err != nil {
				if err != errHang || !hangLogged {
					log.Printf("not registered, retrying: %v", err)
				}
				hangLogged = err == errHang
			} else {
				servers, registeredWith = s, id
			}
			mu.Unlock()
		}
		select {
		case <-done:
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}
