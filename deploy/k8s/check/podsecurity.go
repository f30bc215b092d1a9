package main

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// Verdict is the Pod Security admission library's answer for one pod at one level.
type Verdict struct {
	Allowed   bool        `json:"allowed"`
	Forbidden []Forbidden `json:"forbidden,omitempty"`
}

// Forbidden is one failed check, in the words admission would use.
type Forbidden struct {
	Reason string `json:"reason"`
	Detail string `json:"detail"`
}

// Summary is the verdict as the apiserver would word it.
func (v Verdict) Summary() string {
	if v.Allowed {
		return "allowed"
	}
	parts := make([]string, 0, len(v.Forbidden))
	for _, f := range v.Forbidden {
		parts = append(parts, fmt.Sprintf("%s (%s)", f.Reason, f.Detail))
	}
	return "forbidden: " + strings.Join(parts, ", ")
}

// Admission is the verdict of the enforce level set on the object's namespace.
type Admission struct {
	Namespace string `json:"namespace"`
	Enforce   string `json:"enforce"`
	Verdict
}

var levels = []psapi.Level{psapi.LevelPrivileged, psapi.LevelBaseline, psapi.LevelRestricted}

var evaluator = func() policy.Evaluator {
	e, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		panic(err)
	}
	return e
}()

func evaluate(lv psapi.LevelVersion, podMeta *metav1.ObjectMeta, spec *corev1.PodSpec) Verdict {
	agg := policy.AggregateCheckResults(evaluator.EvaluatePod(lv, podMeta, spec))
	v := Verdict{Allowed: agg.Allowed}
	for i, reason := range agg.ForbiddenReasons {
		v.Forbidden = append(v.Forbidden, Forbidden{Reason: reason, Detail: agg.ForbiddenDetails[i]})
	}
	return v
}

// evaluateAllLevels evaluates a pod at each level, latest version.
func evaluateAllLevels(podMeta *metav1.ObjectMeta, spec *corev1.PodSpec) map[string]Verdict {
	out := map[string]Verdict{}
	for _, level := range levels {
		out[string(level)] = evaluate(psapi.LevelVersion{Level: level, Version: psapi.LatestVersion()}, podMeta, spec)
	}
	return out
}

// podTemplate returns the pod spec and metadata an object creates pods from, if any.
func podTemplate(obj runtime.Object) (*corev1.PodSpec, *metav1.ObjectMeta) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return &o.Spec, &o.ObjectMeta
	case *appsv1.Deployment:
		return &o.Spec.Template.Spec, &o.Spec.Template.ObjectMeta
	case *appsv1.StatefulSet:
		return &o.Spec.Template.Spec, &o.Spec.Template.ObjectMeta
	case *appsv1.DaemonSet:
		return &o.Spec.Template.Spec, &o.Spec.Template.ObjectMeta
	case *batchv1.Job:
		return &o.Spec.Template.Spec, &o.Spec.Template.ObjectMeta
	}
	return nil, nil
}

// admit evaluates each pod template against the enforce level of its namespace, when the same
// build defines that namespace: what Pod Security admission would do to the pods it creates.
func admit(objects []*Object) {
	namespaces := map[string]*corev1.Namespace{}
	for _, o := range objects {
		if ns, ok := o.versioned.(*corev1.Namespace); ok {
			namespaces[ns.Name] = ns
		}
	}
	for _, o := range objects {
		if o.versioned == nil {
			continue
		}
		spec, podMeta := podTemplate(o.versioned)
		ns, ok := namespaces[o.Namespace]
		if spec == nil || !ok {
			continue
		}
		defaults := psapi.Policy{
			Enforce: psapi.LevelVersion{Level: psapi.LevelPrivileged, Version: psapi.LatestVersion()},
			Audit:   psapi.LevelVersion{Level: psapi.LevelPrivileged, Version: psapi.LatestVersion()},
			Warn:    psapi.LevelVersion{Level: psapi.LevelPrivileged, Version: psapi.LatestVersion()},
		}
		pol, errs := psapi.PolicyToEvaluate(ns.Labels, defaults)
		admission := &Admission{Namespace: ns.Name, Enforce: pol.Enforce.String()}
		if len(errs) > 0 {
			admission.Verdict = Verdict{Forbidden: []Forbidden{{Reason: "invalid pod-security labels", Detail: errs.ToAggregate().Error()}}}
		} else {
			admission.Verdict = evaluate(pol.Enforce, podMeta, spec)
		}
		o.Admission = admission
	}
}
