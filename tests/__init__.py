"""The test suite, in tiers by what a test needs of the machine (``make test`` runs them all):

- ``unit``: pure functions, no target process, server or browser (``make test-fast``);
- ``live``: real target processes read by the real sampler (record, sampler, walker, tasks);
- ``serve``: a real ``sidecar serve``: its API, metrics and pushes to Pyroscope;
- ``ui``: the web UI in Debian's Chromium;
- ``faults``: the fault and abuse suite (marker ``faults``): faults, hostile input, scale, soak;
- ``deploy``: what ships: the wheel, the images, the Kubernetes manifests, a pod, the locks.

``support`` holds what they share (processes, servers, oracles, interpreters, Pyroscope), which
the benchmarks use too: ``from tests.support.helpers import Spawner``.
"""
