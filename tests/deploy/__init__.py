"""What ships: the wheel, the container images, the Kubernetes manifests, a pod on this
machine, and the lock files."""
