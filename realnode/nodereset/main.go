// Command gpushare-node-reset stops and removes every pod sandbox of a containerd CRI endpoint
// (the network of each is torn down by the CNI plugins, as on a kubelet's own cleanup). The
// devcluster runs it when it stops a real node, after the kubelet, so nothing of the node's pods
// is left on the host: no container, no veth, no IP lease, no network namespace.
//
//	gpushare-node-reset --endpoint unix:///path/containerd.sock
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	endpoint := flag.String("endpoint", "", "CRI endpoint, unix:///path/to/containerd.sock")
	timeout := flag.Duration("timeout", 60*time.Second, "overall timeout")
	flag.Parse()
	if *endpoint == "" {
		fmt.Fprintln(os.Stderr, "gpushare-node-reset: --endpoint is required")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	conn, err := grpc.NewClient(*endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpushare-node-reset: %v\n", err)
		os.Exit(1)
	}
	defer conn.Close()
	rt := cri.NewRuntimeServiceClient(conn)
	list, err := rt.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpushare-node-reset: listing pod sandboxes: %v\n", err)
		os.Exit(1)
	}
	failed := 0
	for _, sb := range list.Items {
		name := sb.Metadata.Namespace + "/" + sb.Metadata.Name
		if _, err := rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			fmt.Fprintf(os.Stderr, "gpushare-node-reset: stopping %s: %v\n", name, err)
			failed++
			continue
		}
		if _, err := rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			fmt.Fprintf(os.Stderr, "gpushare-node-reset: removing %s: %v\n", name, err)
			failed++
			continue
		}
		fmt.Printf("removed pod sandbox %s\n", name)
	}
	if failed > 0 {
		os.Exit(1)
	}
}
