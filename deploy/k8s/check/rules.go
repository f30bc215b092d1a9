package main

import (
	"fmt"
	"net"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/endpointslice"
	psapi "k8s.io/pod-security-admission/api"
)

// SidecarName is the container name the rules look for.
const SidecarName = "sidecar"

// Rule is one of sidecar's deployment rules, checked on one workload.
type Rule struct {
	Object string `json:"object"`
	Rule   string `json:"rule"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

type ruleSet struct {
	object string
	rules  []Rule
}

func (s *ruleSet) check(rule string, ok bool, detail string, args ...any) {
	s.rules = append(s.rules, Rule{Object: s.object, Rule: rule, OK: ok, Detail: fmt.Sprintf(detail, args...)})
}

// sidecarRules checks every workload of a build that carries the sidecar container.
func sidecarRules(objects []*Object) []Rule {
	out := []Rule{}
	for _, o := range objects {
		if o.versioned == nil {
			continue
		}
		spec, podMeta := podTemplate(o.versioned)
		if spec == nil {
			continue
		}
		c := findSidecar(spec)
		if c == nil {
			continue
		}
		s := &ruleSet{object: o.Kind + "/" + o.Name}
		checkPod(s, spec, c)
		checkStorage(s, spec, c)
		checkProbes(s, c)
		checkToken(s, spec, c)
		checkWiring(s, objects, o, spec, podMeta, c)
		checkPodSecurity(s, o, c)
		out = append(out, s.rules...)
	}
	return out
}

func findSidecar(spec *corev1.PodSpec) *corev1.Container {
	for i := range spec.InitContainers {
		if spec.InitContainers[i].Name == SidecarName {
			return &spec.InitContainers[i]
		}
	}
	for i := range spec.Containers {
		if spec.Containers[i].Name == SidecarName {
			return &spec.Containers[i]
		}
	}
	return nil
}

// flags reads --name=value and --name value from a container's command and args.
func flags(c *corev1.Container) map[string]string {
	out := map[string]string{}
	all := append(append([]string{}, c.Command...), c.Args...)
	for i := 0; i < len(all); i++ {
		a := all[i]
		if !strings.HasPrefix(a, "--") {
			continue
		}
		if name, value, ok := strings.Cut(a, "="); ok {
			out[name] = value
		} else if i+1 < len(all) && !strings.HasPrefix(all[i+1], "--") {
			out[a] = all[i+1]
			i++
		} else {
			out[a] = ""
		}
	}
	return out
}

func addedCaps(c *corev1.Container) []corev1.Capability {
	if c.SecurityContext == nil || c.SecurityContext.Capabilities == nil {
		return nil
	}
	return c.SecurityContext.Capabilities.Add
}

func hasPtrace(c *corev1.Container) bool {
	for _, capability := range addedCaps(c) {
		if strings.TrimPrefix(string(capability), "CAP_") == "SYS_PTRACE" {
			return true
		}
	}
	return false
}

func checkPod(s *ruleSet, spec *corev1.PodSpec, c *corev1.Container) {
	native := false
	for i := range spec.InitContainers {
		if &spec.InitContainers[i] == c {
			native = c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		}
	}
	s.check("native-sidecar", native, "an init container with restartPolicy: Always (starts before the app, outlives it)")
	s.check("share-process-namespace", spec.ShareProcessNamespace != nil && *spec.ShareProcessNamespace,
		"shareProcessNamespace: true, or the sidecar sees no process of the app")
	s.check("no-service-account-token", spec.AutomountServiceAccountToken != nil && !*spec.AutomountServiceAccountToken,
		"automountServiceAccountToken: false")

	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	dropAll := false
	if sc.Capabilities != nil {
		for _, d := range sc.Capabilities.Drop {
			dropAll = dropAll || d == "ALL"
		}
	}
	onlyPtrace := true
	for _, a := range addedCaps(c) {
		onlyPtrace = onlyPtrace && strings.TrimPrefix(string(a), "CAP_") == "SYS_PTRACE"
	}
	s.check("capabilities", dropAll && onlyPtrace, "drop ALL, add nothing but SYS_PTRACE (adds %v)", addedCaps(c))
	s.check("not-privileged", sc.Privileged == nil || !*sc.Privileged, "privileged is not set")
	s.check("no-privilege-escalation", sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation,
		"allowPrivilegeEscalation: false")
	s.check("read-only-root", sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, "readOnlyRootFilesystem: true")
	seccomp := sc.SeccompProfile
	if seccomp == nil && spec.SecurityContext != nil {
		seccomp = spec.SecurityContext.SeccompProfile
	}
	s.check("seccomp", seccomp != nil && seccomp.Type == corev1.SeccompProfileTypeRuntimeDefault, "seccompProfile: RuntimeDefault")

	req, lim := c.Resources.Requests, c.Resources.Limits
	missing := []string{}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		if _, ok := req[name]; !ok {
			missing = append(missing, "requests."+string(name))
		}
		if _, ok := lim[name]; !ok {
			missing = append(missing, "limits."+string(name))
		}
	}
	s.check("resources", len(missing) == 0, "requests and limits for cpu, memory and ephemeral-storage (missing %v)", missing)
}

// mountFor returns the volume mounted at the deepest mount path holding file.
func mountFor(spec *corev1.PodSpec, c *corev1.Container, file string) (*corev1.Volume, *corev1.VolumeMount) {
	var best *corev1.VolumeMount
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		mp := strings.TrimSuffix(m.MountPath, "/")
		if strings.HasPrefix(path.Clean(file), mp+"/") && (best == nil || len(mp) > len(best.MountPath)) {
			best = m
		}
	}
	if best == nil {
		return nil, nil
	}
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == best.Name {
			return &spec.Volumes[i], best
		}
	}
	return nil, best
}

var sizeRE = regexp.MustCompile(`^\s*(\d+)\s*([KMGkmg]?)(?:i?[Bb])?\s*$`)

// parseSize reads sidecar's --max-db-size (200K, 50M, 2G: powers of 1024).
func parseSize(text string) (int64, bool) {
	m := sizeRE.FindStringSubmatch(text)
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, false
	}
	return n << map[string]uint{"": 0, "K": 10, "M": 20, "G": 30}[strings.ToUpper(m[2])], true
}

var durationRE = regexp.MustCompile(`^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$`)

// parseDuration reads sidecar's --retention (90, 90s, 15m, 24h, 7d).
func parseDuration(text string) (time.Duration, bool) {
	m := durationRE.FindStringSubmatch(text)
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, false
	}
	unit := map[string]time.Duration{"": time.Second, "s": time.Second, "m": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[m[2]]
	return time.Duration(n * float64(unit)), true
}

func checkStorage(s *ruleSet, spec *corev1.PodSpec, c *corev1.Container) {
	f := flags(c)
	db, ok := f["--db"]
	vol, _ := mountFor(spec, c, db)
	sized := ok && vol != nil && vol.EmptyDir != nil && vol.EmptyDir.SizeLimit != nil && vol.EmptyDir.SizeLimit.Sign() > 0
	s.check("database-on-sized-emptydir", sized, "--db (%q) on an emptyDir with a sizeLimit", db)

	retention, ok := parseDuration(f["--retention"])
	s.check("retention", ok && retention > 0 && retention <= 7*24*time.Hour,
		"--retention set explicitly, at most 7d (is %q)", f["--retention"])
	if sized {
		limit := vol.EmptyDir.SizeLimit.Value()
		capBytes, ok := parseSize(f["--max-db-size"])
		s.check("database-cap-below-volume", ok && capBytes*2 <= limit,
			"--max-db-size (%q) at most half the emptyDir's sizeLimit (%s): past its sizeLimit the pod is evicted",
			f["--max-db-size"], vol.EmptyDir.SizeLimit.String())
	}

	// The kubelet evicts the pod when its ephemeral-storage use (writable layers, logs,
	// emptyDirs on disk) passes the sum of its containers' limits, computed as below: the
	// sidecar's own limit must cover the emptyDirs it writes.
	var volumes int64
	for _, m := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.EmptyDir != nil && v.EmptyDir.Medium != corev1.StorageMediumMemory && v.EmptyDir.SizeLimit != nil {
				volumes += v.EmptyDir.SizeLimit.Value()
			}
		}
	}
	own := c.Resources.Limits[corev1.ResourceEphemeralStorage]
	pod := resourcehelper.PodLimits(&corev1.Pod{Spec: *spec}, resourcehelper.PodResourcesOptions{})[corev1.ResourceEphemeralStorage]
	s.check("ephemeral-storage-covers-volumes", own.Value() > volumes,
		"the sidecar's ephemeral-storage limit (%s) exceeds the sizeLimits of the emptyDirs it mounts (%s); pod limit %s",
		own.String(), resource.NewQuantity(volumes, resource.BinarySI).String(), pod.String())
}

func checkProbes(s *ruleSet, c *corev1.Container) {
	port := sidecarPort(c)
	onHealthz := func(p *corev1.Probe) bool {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
			return false
		}
		target := p.HTTPGet.Port
		return (target.Type == intstr.Int && port != nil && target.IntVal == port.ContainerPort) ||
			(target.Type == intstr.String && port != nil && target.StrVal == port.Name)
	}
	s.check("startup-probe", onHealthz(c.StartupProbe), "startupProbe: httpGet /healthz on the sidecar's port")
	s.check("liveness-probe", onHealthz(c.LivenessProbe), "livenessProbe: httpGet /healthz on the sidecar's port")
	s.check("no-readiness-probe", c.ReadinessProbe == nil,
		"no readinessProbe: a sidecar's readiness counts toward the pod's, which would take the app out of its Service")
}

func sidecarPort(c *corev1.Container) *corev1.ContainerPort {
	want := int32(8321)
	if p, err := strconv.Atoi(flags(c)["--port"]); err == nil {
		want = int32(p)
	}
	for i := range c.Ports {
		if c.Ports[i].ContainerPort == want {
			return &c.Ports[i]
		}
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func checkToken(s *ruleSet, spec *corev1.PodSpec, c *corev1.Container) {
	f := flags(c)
	host, ok := f["--host"]
	if !ok {
		host = "127.0.0.1"
	}
	if isLoopback(host) {
		s.check("token-when-not-loopback", true, "listens on loopback (%s): reachable by port-forward only, no token needed", host)
		return
	}
	tokenFile := f["--token-file"]
	vol, mount := mountFor(spec, c, tokenFile)
	fromSecret := vol != nil && vol.Secret != nil && mount.ReadOnly
	s.check("token-when-not-loopback", tokenFile != "" && fromSecret,
		"listens on %s, beyond loopback: --token-file (%q) read from a Secret volume mounted read-only", host, tokenFile)
}

// checkWiring checks that a Service routes to the sidecar's port (resolved the way the
// EndpointSlice controller resolves it) and that a NetworkPolicy selects the pod, admits the
// sidecar's port only from chosen peers, and keeps the app's ports open.
func checkWiring(s *ruleSet, objects []*Object, o *Object, spec *corev1.PodSpec, podMeta *metav1.ObjectMeta, c *corev1.Container) {
	port := sidecarPort(c)
	s.check("sidecar-port", port != nil, "the sidecar declares the port it listens on (--port)")
	if port == nil {
		return
	}
	podLabels := labels.Set(podMeta.Labels)
	pod := &corev1.Pod{ObjectMeta: *podMeta, Spec: *spec}
	services, policies := []string{}, []string{}
	appPortsOpen := true
	for _, other := range objects {
		if other.Namespace != o.Namespace {
			continue
		}
		switch x := other.versioned.(type) {
		case *corev1.Service:
			if len(x.Spec.Selector) == 0 || !labels.SelectorFromSet(x.Spec.Selector).Matches(podLabels) {
				continue
			}
			for i := range x.Spec.Ports {
				if n, err := endpointslice.FindPort(pod, &x.Spec.Ports[i]); err == nil && int32(n) == port.ContainerPort {
					services = append(services, x.Name)
				}
			}
		case *networkingv1.NetworkPolicy:
			sel, err := metav1.LabelSelectorAsSelector(&x.Spec.PodSelector)
			if err != nil || !sel.Matches(podLabels) || !hasIngressType(x) {
				continue
			}
			guarded, open := false, false
			for _, rule := range x.Spec.Ingress {
				if !rulePortMatches(rule.Ports, port) {
					continue
				}
				if len(rule.From) == 0 {
					open = true
				} else {
					guarded = true
				}
			}
			if guarded && !open {
				policies = append(policies, x.Name)
			}
			for _, app := range spec.Containers {
				for i := range app.Ports {
					allowed := false
					for _, rule := range x.Spec.Ingress {
						allowed = allowed || (len(rule.From) == 0 && rulePortMatches(rule.Ports, &app.Ports[i]))
					}
					appPortsOpen = appPortsOpen && allowed
				}
			}
		}
	}
	s.check("service", len(services) > 0, "a Service selects the pod and routes to port %d (services %v)", port.ContainerPort, services)
	s.check("network-policy", len(policies) > 0,
		"a NetworkPolicy selects the pod and admits port %d from chosen peers only (policies %v)", port.ContainerPort, policies)
	s.check("network-policy-keeps-app-ports", appPortsOpen, "the policies leave the app's own ports open as before")
}

func hasIngressType(np *networkingv1.NetworkPolicy) bool {
	for _, t := range np.Spec.PolicyTypes {
		if t == networkingv1.PolicyTypeIngress {
			return true
		}
	}
	return len(np.Spec.PolicyTypes) == 0
}

func rulePortMatches(ports []networkingv1.NetworkPolicyPort, p *corev1.ContainerPort) bool {
	if len(ports) == 0 {
		return true
	}
	for _, np := range ports {
		if np.Protocol != nil && *np.Protocol != p.Protocol {
			continue
		}
		if np.Port == nil {
			return true
		}
		if np.Port.Type == intstr.String && np.Port.StrVal == p.Name {
			return true
		}
		if np.Port.Type == intstr.Int {
			end := np.Port.IntVal
			if np.EndPort != nil {
				end = *np.EndPort
			}
			if p.ContainerPort >= np.Port.IntVal && p.ContainerPort <= end {
				return true
			}
		}
	}
	return false
}

// checkPodSecurity states what Pod Security admission must say of the pod: with SYS_PTRACE,
// "privileged" admits it and "baseline" rejects it for that capability and nothing else;
// without any added capability, "restricted" admits it.
func checkPodSecurity(s *ruleSet, o *Object, c *corev1.Container) {
	privileged, baseline, restricted := o.PodSecurity[string(psapi.LevelPrivileged)], o.PodSecurity[string(psapi.LevelBaseline)], o.PodSecurity[string(psapi.LevelRestricted)]
	if hasPtrace(c) {
		s.check("pod-security-privileged", privileged.Allowed, "admitted at privileged: %s", privileged.Summary())
		onlyPtrace := !baseline.Allowed && len(baseline.Forbidden) > 0
		for _, f := range baseline.Forbidden {
			onlyPtrace = onlyPtrace && f.Reason == "non-default capabilities" && strings.Contains(f.Detail, "SYS_PTRACE")
		}
		s.check("pod-security-baseline-rejects-ptrace", onlyPtrace,
			"rejected at baseline for SYS_PTRACE and nothing else: %s", baseline.Summary())
	} else {
		s.check("pod-security-restricted", restricted.Allowed, "without capabilities the pod meets restricted: %s", restricted.Summary())
	}
}
