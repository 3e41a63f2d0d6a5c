"""A real local Kubernetes control plane (etcd, kube-apiserver, kcm, scheduler, kwok) on loopback."""
