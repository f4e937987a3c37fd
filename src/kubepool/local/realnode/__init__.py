"""Real nodes of the local cluster: upstream kubelets on containerd + runc, pods in containers on a bridge.

`kind: kubelet` entries of the nodes config (or `kubepool local up --real-nodes N`) start one containerd and one
kubelet per node, a bridge per cluster for the pods, CoreDNS for cluster names and an ingress NetworkPolicy
enforcer. Modules:

    network     the addresses, bridge and CNI config of a cluster's real nodes (pure)
    configs     containerd's and the kubelet's config files and command lines (pure)
    host        what `up` changes on the host (bridge, addresses, iptables, sysctls) and how `down` undoes it
    images      the pause image (built here) and importing the built images into a node's containerd
    dns         CoreDNS: its Corefile (pure) and build
    netpol      the NetworkPolicy enforcer (ingress; iptables rules as a pure function of the API objects)
    nodes       bringing the nodes up and down (the control plane calls this)
"""
