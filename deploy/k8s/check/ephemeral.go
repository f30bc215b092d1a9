package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	podutil "k8s.io/kubernetes/pkg/api/pod"
	api "k8s.io/kubernetes/pkg/apis/core"
	corevalidation "k8s.io/kubernetes/pkg/apis/core/validation"
	psapi "k8s.io/pod-security-admission/api"
	sigsyaml "sigs.k8s.io/yaml"
)

// EphemeralCommand is what the README's recipe runs in the ephemeral container:
//
//	kubectl debug POD --profile=general --custom=deploy/k8s/debug/sidecar-debug.yaml \
//	  --target=app --image=IMAGE --container=sidecar-debug -- sidecar serve ...
var EphemeralCommand = []string{"sidecar", "serve", "--host=127.0.0.1", "--port=8321", "--db=/tmp/sidecar.db", "--retention=1h", "--max-db-size=256M"}

// checkEphemeral builds the ephemeral container the recipe creates, the way kubectl debug does
// (k8s.io/kubectl/pkg/cmd/debug: the general profile adds SYS_PTRACE to an ephemeral container;
// --custom is then merged in as a strategic merge patch on corev1.Container), adds it to a
// plain pod that meets "restricted", and runs the apiserver's validation of an
// ephemeralcontainers update and Pod Security admission on the result.
func checkEphemeral(file string) (*Object, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	obj := &Object{Kind: "Pod", APIVersion: "v1", Name: "app/ephemeralcontainers", ValidationErrors: []string{}, Warnings: []string{}}
	var custom corev1.Container
	if err := sigsyaml.UnmarshalStrict(data, &custom); err != nil {
		obj.DecodeError = fmt.Sprintf("%s: %v", file, err)
		return obj, nil
	}
	// kubectl refuses a custom profile that sets these.
	if custom.Name != "" || len(custom.Command) > 0 || custom.Image != "" || custom.Lifecycle != nil || len(custom.VolumeDevices) > 0 {
		obj.DecodeError = fmt.Sprintf("%s: name, command, image, lifecycle and volume devices are not modifiable via custom profile", file)
		return obj, nil
	}

	old := targetPod()
	ec := corev1.EphemeralContainer{
		TargetContainerName: "app",
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "sidecar-debug", Image: "sidecar:0.1.0", ImagePullPolicy: corev1.PullIfNotPresent,
			Command: EphemeralCommand, TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		},
	}
	ec.SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_PTRACE"}}}
	base, err := json.Marshal(ec)
	if err != nil {
		return nil, err
	}
	custom.Name = ec.Name // as kubectl does before merging
	patch, err := json.Marshal(custom)
	if err != nil {
		return nil, err
	}
	merged, err := strategicpatch.StrategicMergePatch(base, patch, corev1.Container{})
	if err != nil {
		return nil, fmt.Errorf("custom profile: %w", err)
	}
	ec = corev1.EphemeralContainer{}
	if err := json.Unmarshal(merged, &ec); err != nil {
		return nil, err
	}
	updated := old.DeepCopy()
	updated.Spec.EphemeralContainers = append(updated.Spec.EphemeralContainers, ec)
	legacyscheme.Scheme.Default(old)
	legacyscheme.Scheme.Default(updated)
	obj.versioned = updated

	var oldInternal, newInternal api.Pod
	if err := legacyscheme.Scheme.Convert(old, &oldInternal, nil); err != nil {
		return nil, err
	}
	if err := legacyscheme.Scheme.Convert(updated, &newInternal, nil); err != nil {
		return nil, err
	}
	opts := podutil.GetValidationOptionsFromPodSpecAndMeta(&newInternal.Spec, &oldInternal.Spec, &newInternal.ObjectMeta, &oldInternal.ObjectMeta)
	for _, e := range corevalidation.ValidatePodEphemeralContainersUpdate(&newInternal, &oldInternal, opts) {
		obj.ValidationErrors = append(obj.ValidationErrors, e.Error())
	}
	obj.PodSecurity = evaluateAllLevels(&updated.ObjectMeta, &updated.Spec)

	// What the recipe must show: the target pod alone meets restricted; with the ephemeral
	// container, privileged admits it and baseline rejects it for SYS_PTRACE alone.
	s := &ruleSet{object: "ephemeral sidecar-debug"}
	before := evaluate(psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}, &old.ObjectMeta, &old.Spec)
	s.check("target-pod-restricted", before.Allowed, "the pod before the recipe meets restricted: %s", before.Summary())
	s.check("pod-security-privileged", obj.PodSecurity["privileged"].Allowed, "admitted at privileged: %s", obj.PodSecurity["privileged"].Summary())
	baseline := obj.PodSecurity["baseline"]
	onlyPtrace := !baseline.Allowed && len(baseline.Forbidden) > 0
	for _, f := range baseline.Forbidden {
		onlyPtrace = onlyPtrace && f.Reason == "non-default capabilities" && strings.Contains(f.Detail, "SYS_PTRACE")
	}
	s.check("pod-security-baseline-rejects-ptrace", onlyPtrace, "rejected at baseline for SYS_PTRACE alone: %s", baseline.Summary())
	sc := ec.SecurityContext
	dropAll := sc != nil && sc.Capabilities != nil && len(sc.Capabilities.Drop) == 1 && sc.Capabilities.Drop[0] == "ALL"
	s.check("capabilities", dropAll && hasPtrace(&corev1.Container{SecurityContext: sc}), "drop ALL, add SYS_PTRACE")
	s.check("no-privilege-escalation", sc != nil && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation, "allowPrivilegeEscalation: false")
	obj.Rules = s.rules
	return obj, nil
}

// targetPod is a running pod as it exists before the recipe: one app container that meets
// the restricted level, no sidecar, no shared process namespace.
func targetPod() *corev1.Pod {
	yes, no, uid := true, false, int64(10001)
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default", ResourceVersion: "1", Labels: map[string]string{"app.kubernetes.io/name": "app"}},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "app", Image: "app:1", ImagePullPolicy: corev1.PullIfNotPresent,
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot: &yes, RunAsUser: &uid, AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
	rest.FillObjectMetaSystemFields(&pod.ObjectMeta)
	return pod
}
